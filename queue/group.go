package queue

import (
	"slices"
	"strings"
	"time"
)

// group is the waiters that may use the same windows (the same Exclude
// list): a pool of pods. Each group has its own order, shortest first when
// any window it may use is (SetWindowOrder), so one pool under pressure does
// not reorder another's queue.
type group struct {
	key     string
	exclude []string // the members' shared Exclude list
	fifo    heap     // its waiters, oldest first (after priority)
	size    heap     // its waiters, fewest tokens first (after priority)
}

// groupKey names the group of waiters that exclude exactly these windows.
func groupKey(exclude []string) string {
	if len(exclude) == 0 {
		return ""
	}
	s := slices.Clone(exclude)
	slices.Sort(s)
	return strings.Join(slices.Compact(s), "\x00")
}

// groupFor returns the group of a request excluding exclude, creating it.
func (c *Core) groupFor(exclude []string) *group {
	k := groupKey(exclude)
	g := c.groups[k]
	if g == nil {
		g = &group{key: k, exclude: exclude, fifo: heap{kind: groupArrival}, size: heap{kind: groupSize}}
		c.groups[k] = g
	}
	return g
}

// shortestFirst reports whether g serves shortest first: some window its
// waiters may use is in that order.
func (c *Core) shortestFirst(g *group) bool {
	for _, w := range c.windows {
		if w.order == ShortestFirst && !w.removed && !slices.Contains(g.exclude, w.name) {
			return true
		}
	}
	return false
}

// head is g's waiter to consider first at now, and whether it was taken
// as the shortest (not by arrival or age).
func (c *Core) head(g *group, now time.Time) (it *item, bySize bool) {
	oldest := g.fifo.top()
	if !c.shortestFirst(g) || now.Sub(oldest.arrival) >= c.s.StarvationAfter {
		return oldest, false
	}
	return g.size.top(), true
}

// next returns the waiter to consider first at now: of the groups' heads,
// the highest priority; then an aged or FIFO head before a shortest-first
// one, the fewer tokens between two shortest-first heads, the older
// otherwise. With every window in one order this is the order of one queue.
func (c *Core) next(now time.Time) *item {
	var best *item
	bestBySize := false
	for _, g := range c.groups {
		if g.fifo.len() == 0 {
			continue
		}
		it, bySize := c.head(g, now)
		if best == nil || before(it, bySize, best, bestBySize) {
			best, bestBySize = it, bySize
		}
	}
	return best
}

// before reports whether head a goes before head b.
func before(a *item, aBySize bool, b *item, bBySize bool) bool {
	switch {
	case a.priority != b.priority:
		return a.priority > b.priority
	case aBySize != bBySize:
		return !aBySize // aged or FIFO heads first: they have waited longest
	case aBySize && a.tokens != b.tokens:
		return a.tokens < b.tokens
	}
	return a.seq < b.seq
}
