package queue

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Availability is whether an upstream can take new work, decided at
// dispatch from its current state (health, error breaker, pressure level).
type Availability int

// Availabilities, from best to worst.
const (
	// Available: the upstream may take new work now.
	Available Availability = iota
	// Paused: not now, but soon by itself (critical pressure, a half-open
	// error breaker whose probes are out): waiters keep their place.
	Paused
	// Down: it cannot take work (failing health checks, an open error
	// breaker). A waiter that no other upstream can take is refused at once
	// with ErrUnavailable instead of waiting out its deadline.
	Down
)

// String returns "available", "paused" or "down".
func (a Availability) String() string {
	switch a {
	case Available:
		return "available"
	case Paused:
		return "paused"
	case Down:
		return "down"
	}
	return "availability(" + strconv.Itoa(int(a)) + ")"
}

// window is one upstream's batch window.
type window struct {
	name     string
	limit    int
	inflight int   // slots (sequences) held; may exceed limit after a cut; new dispatch waits below it
	removed  bool  // RemoveWindow called while slots were still held
	order    Order // for the waiters that may use it (SetWindowOrder)
	// budget bounds the Memory of the requests in flight (0: no bound);
	// held is theirs. tokenLimit and tokens do the same for their Tokens.
	// Like inflight after a cut, what is held may exceed a bound that shrank.
	budget, held       int64
	tokenLimit, tokens int64
	// reserved: a waiter that fits the budget but not what is left of it
	// now waits for this window, and nobody overtakes it here until the next
	// dispatch (which recomputes it).
	reserved bool
	// rate measures how fast the window gives slots back (Release): the
	// deadline check's service rate. area is the slot-seconds it has held
	// up to areaAt (accrue), which scale that rate to what it holds now.
	rate   serviceRate
	area   float64
	areaAt time.Time
	// used counts the slots each tenant account holds here (share.go); nil
	// while shares are off.
	used map[*account]int
}

// take counts one more request of the given cost in flight from now.
func (w *window) take(now time.Time, c Cost) {
	w.accrue(now)
	w.inflight += c.slots()
	w.held += c.Memory
	w.tokens += c.Tokens
}

// give takes one request of the given cost out of flight at now, and
// counts its release in the window's service rate.
func (w *window) give(now time.Time, c Cost) {
	w.accrue(now)
	w.rate.add(now, w.area, c.slots())
	w.inflight = max(w.inflight-c.slots(), 0)
	w.held = max(w.held-c.Memory, 0)
	w.tokens = max(w.tokens-c.Tokens, 0)
	if w.inflight == 0 {
		w.held, w.tokens = 0, 0
	}
}

// fits reports whether a request of the given cost fits w's slots, memory
// budget and token limit now. A request above the whole limit or token
// limit still runs alone (both move with cuts; its memory is bounded by the
// budget).
func (w *window) fits(c Cost) bool {
	return (w.budget == 0 || w.held+c.Memory <= w.budget) &&
		(w.inflight+c.slots() <= w.limit || w.inflight == 0) &&
		(w.tokenLimit == 0 || w.tokens+c.Tokens <= w.tokenLimit || w.inflight == 0)
}

// state is the window's availability now: Down once removed, else what the
// Availability func says (Available when none is set).
func (c *Core) state(w *window) Availability {
	switch {
	case w.removed:
		return Down
	case c.avail == nil:
		return Available
	}
	return c.avail(w.name)
}

// room is how many more slots the window may start now.
func (c *Core) room(w *window) int {
	if w.inflight >= w.limit || c.state(w) != Available {
		return 0
	}
	return w.limit - w.inflight
}

// InFlight returns how many slots (sequences) the window named name holds;
// 0 for an unknown name.
func (c *Core) InFlight(name string) int {
	if w, _ := c.find(name); w != nil {
		return w.inflight
	}
	return 0
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

// choose returns the window a request of the given cost, excluding exclude,
// should take now: of those with room whose bounds it fits and that no
// waiter has reserved, the one the Scorer scores highest for its prefix
// (without a Scorer, or on equal scores, the one with the most room; then
// the first by name), and its score (0 without a Scorer). Nil means none.
//
// With shares on, a (the request's tenant's account; nil when it has none)
// must also be within its share there (shareOK).
func (c *Core) choose(exclude []string, prefix []uint64, cost Cost, a *account) (*window, float64) {
	var best *window
	bestRoom, bestScore := 0, 0.0
	for _, w := range c.windows {
		r := c.room(w)
		if r == 0 || !w.fits(cost) || w.reserved || slices.Contains(exclude, w.name) || !c.shareOK(w, a, cost.slots()) {
			continue
		}
		score := 0.0
		if c.scorer != nil {
			score = c.scorer.Score(w.name, w.inflight, w.limit, prefix)
		}
		if best == nil || score > bestScore || score == bestScore && r > bestRoom {
			best, bestRoom, bestScore = w, r, score
		}
	}
	return best, bestScore
}

// reserve marks every window it may use that has room but not the slots,
// memory or tokens for it, when it could fit there once what is in flight is given
// back (its memory is within the budget). A window its tenant's share keeps
// it out of is not reserved: others may use it meanwhile.
func (c *Core) reserve(it *item) {
	for _, w := range c.windows {
		if c.room(w) > 0 && !w.fits(it.cost()) && (w.budget == 0 || it.memory <= w.budget) &&
			!slices.Contains(it.exclude, w.name) && c.shareOK(w, it.tenant.acct, it.seqs) {
			w.reserved = true
		}
	}
}

// shareBlocked reports whether only its tenant's share keeps it out now:
// no window it may use with room lets its tenant start it, and some would
// if it were not for the share.
func (c *Core) shareBlocked(it *item) bool {
	cost, blocked := it.cost(), false
	for _, w := range c.windows {
		if c.room(w) == 0 || w.reserved || !w.fits(cost) || slices.Contains(it.exclude, w.name) {
			continue
		}
		if c.shareOK(w, it.tenant.acct, cost.slots()) {
			return false
		}
		blocked = true
	}
	return blocked
}

// canFit reports whether a request of the given memory excluding exclude fits
// the whole budget of some window it may use that is not Down.
func (c *Core) canFit(exclude []string, memory int64) bool {
	for _, w := range c.windows {
		if c.state(w) != Down && (w.budget == 0 || memory <= w.budget) && !slices.Contains(exclude, w.name) {
			return true
		}
	}
	return false
}

// anyRoom reports whether some window that no waiter has reserved could
// start a request now.
func (c *Core) anyRoom() bool {
	for _, w := range c.windows {
		if c.room(w) > 0 && !w.reserved {
			return true
		}
	}
	return false
}

// reachable reports whether some window a request excluding exclude may use
// is Available or Paused: worth waiting for.
func (c *Core) reachable(exclude []string) bool {
	for _, w := range c.windows {
		if c.state(w) != Down && !slices.Contains(exclude, w.name) {
			return true
		}
	}
	return false
}

// anyDown reports whether some window is Down.
func (c *Core) anyDown() bool {
	for _, w := range c.windows {
		if c.state(w) == Down {
			return true
		}
	}
	return false
}

// SetWindow sets the limit of the window named name, creating a window if
// there is none (or reviving one that RemoveWindow left draining).
// A negative limit counts as 0. A limit below in-flight cancels nothing: new
// dispatch waits until in-flight falls below it. Call Dispatch afterwards.
func (c *Core) SetWindow(name string, limit int) {
	limit = max(limit, 0)
	w, i := c.find(name)
	if w != nil {
		w.removed = false
		w.limit = limit
		return
	}
	c.windows = slices.Insert(c.windows, i, &window{name: name, limit: limit, order: c.order})
}

// SetMemoryBudget bounds the Memory of the requests in flight on the window
// named name (0 or negative: no bound), from the free memory its pod reports.
// A budget below what is held cancels nothing: new dispatch waits until
// enough is given back. Unknown names are ignored. Call Dispatch afterwards.
func (c *Core) SetMemoryBudget(name string, budget int64) {
	if w, _ := c.find(name); w != nil {
		w.budget = max(budget, 0)
	}
}

// SetTokenLimit bounds the estimated Tokens of the requests in flight on the
// window named name (0 or negative: no bound): the token-budget window, cut
// and ramped with the request window by its caller. A request above the
// whole limit runs when nothing else is in flight. Unknown names are
// ignored. Call Dispatch afterwards.
func (c *Core) SetTokenLimit(name string, limit int64) {
	if w, _ := c.find(name); w != nil {
		w.tokenLimit = max(limit, 0)
	}
}

// SetAvailability sets the function that says, at every dispatch, whether an
// upstream can take new work. It is called with the Core's caller's locks
// held, so it must only read state and never call back into the queue:
// gatekeeper's (pods.Registry.Published) loads a published snapshot and
// takes no lock. Nil means every window is Available.
// Slots already held are kept whatever it says. Call Dispatch afterwards.
func (c *Core) SetAvailability(f func(upstream string) Availability) { c.avail = f }

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
		w.removed, w.limit = true, 0
	}
}
