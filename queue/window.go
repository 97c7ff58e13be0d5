package queue

import (
	"slices"
	"strings"
)

// window is one upstream's batch window.
type window struct {
	name      string
	limit     int
	inflight  int  // may exceed limit after a cut; new dispatch waits below it
	available bool // false: open error breaker or critical pressure
	removed   bool // RemoveWindow called while slots were still held
}

// room is how many more requests the window may start now.
func (w *window) room() int {
	if !w.available || w.removed || w.inflight >= w.limit {
		return 0
	}
	return w.limit - w.inflight
}

// find returns the window named name and its index, or nil and the index
// where it would be inserted. Windows are kept sorted by name.
func (c *Core) find(name string) (*window, int) {
	i, ok := slices.BinarySearchFunc(c.windows, name, func(w *window, n string) int {
		return strings.Compare(w.name, n)
	})
	if !ok {
		return nil, i
	}
	return c.windows[i], i
}

// choose returns the window a request excluding exclude should take now: the
// one with the most room; ties go to the first by name. Nil means none.
func (c *Core) choose(exclude []string) *window {
	var best *window
	bestRoom := 0
	for _, w := range c.windows {
		if r := w.room(); r > bestRoom && !slices.Contains(exclude, w.name) {
			best, bestRoom = w, r
		}
	}
	return best
}

// anyRoom reports whether some window could start a request now.
func (c *Core) anyRoom() bool {
	for _, w := range c.windows {
		if w.room() > 0 {
			return true
		}
	}
	return false
}

// SetWindow sets the limit of the window named name, creating an available
// window if there is none (or reviving one that RemoveWindow left draining).
// A negative limit counts as 0. A limit below in-flight cancels nothing: new
// dispatch waits until in-flight falls below it. Call Dispatch afterwards.
func (c *Core) SetWindow(name string, limit int) {
	limit = max(limit, 0)
	w, i := c.find(name)
	if w != nil {
		if w.removed {
			w.removed, w.available = false, true
		}
		w.limit = limit
		return
	}
	c.windows = slices.Insert(c.windows, i, &window{name: name, limit: limit, available: true})
}

// SetAvailable marks the window named name available for dispatch or not (an
// open error breaker or critical pressure). Slots already held are kept.
// Unknown names are ignored. Call Dispatch afterwards.
func (c *Core) SetAvailable(name string, ok bool) {
	if w, _ := c.find(name); w != nil {
		w.available = ok
	}
}

// RemoveWindow stops all dispatch to the window named name. While slots on it
// are held it stays listed in Stats (limit 0, unavailable) so their Release
// still counts; it disappears when the last one is released.
func (c *Core) RemoveWindow(name string) {
	w, i := c.find(name)
	switch {
	case w == nil:
	case w.inflight == 0:
		c.windows = slices.Delete(c.windows, i, i+1)
	default:
		w.removed, w.available, w.limit = true, false, 0
	}
}
