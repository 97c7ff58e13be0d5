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
	key      string
	exclude  []string // the members' shared Exclude list
	fifo     heap     // its waiters, oldest first (after priority)
	size     heap     // its waiters, fewest tokens first (after priority)
	deadline heap     // its waiters, earliest deadline first (after priority)
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
		g = &group{key: k, exclude: exclude, fifo: heap{kind: groupArrival}, size: heap{kind: groupSize},
			deadline: heap{kind: groupDeadline}}
		c.groups[k] = g
	}
	return g
}

// orderOf is g's order: EarliestDeadline when some window its waiters may
// use is in that order, else ShortestFirst when some is in that one, else
// FIFO (SetWindowOrder).
func (c *Core) orderOf(g *group) Order {
	o := FIFO
	for _, w := range c.windows {
		if !w.removed && !slices.Contains(g.exclude, w.name) {
			o = stronger(o, w.order)
		}
	}
	return o
}

// stronger is the order of waiters whose windows serve in a and b:
// EarliestDeadline over ShortestFirst over FIFO.
func stronger(a, b Order) Order {
	switch {
	case a == EarliestDeadline || b == EarliestDeadline:
		return EarliestDeadline
	case a == ShortestFirst || b == ShortestFirst:
		return ShortestFirst
	}
	return a
}

// headKind is how a group's head was chosen.
type headKind uint8

const (
	byAge      headKind = iota // FIFO, or aged past StarvationAfter under ShortestFirst
	bySize                     // the shortest, under ShortestFirst
	byDeadline                 // the earliest deadline, under EarliestDeadline
)

// head is g's waiter to consider first at now, and how it was chosen.
func (c *Core) head(g *group, now time.Time) (*item, headKind) {
	oldest := g.fifo.top()
	switch c.orderOf(g) {
	case EarliestDeadline:
		return g.deadline.top(), byDeadline
	case ShortestFirst:
		if now.Sub(oldest.arrival) < c.s.StarvationAfter {
			return g.size.top(), bySize
		}
	}
	return oldest, byAge
}

// next returns the waiter to consider first at now: of the groups' heads,
// the highest priority; then an aged or FIFO head before a deadline head
// before a shortest-first one, the earlier deadline between two deadline
// heads, the fewer tokens between two shortest-first heads, the older
// otherwise. With every window in one order this is the order of one queue.
func (c *Core) next(now time.Time) *item {
	var best *item
	var bestKind headKind
	for _, g := range c.groups {
		if g.fifo.len() == 0 {
			continue
		}
		it, kind := c.head(g, now)
		if best == nil || before(it, kind, best, bestKind) {
			best, bestKind = it, kind
		}
	}
	return best
}

// before reports whether head a (chosen as ak) goes before head b (bk).
func before(a *item, ak headKind, b *item, bk headKind) bool {
	switch {
	case a.priority != b.priority:
		return a.priority > b.priority
	case ak != bk:
		return rank(ak) < rank(bk) // aged or FIFO heads first: they have waited longest
	case ak == bySize && a.tokens != b.tokens:
		return a.tokens < b.tokens
	case ak == byDeadline && !a.deadline.Equal(b.deadline):
		return earlier(a.deadline, b.deadline)
	}
	return a.seq < b.seq
}

// rank orders head kinds between groups of different orders.
func rank(k headKind) int {
	switch k {
	case byAge:
		return 0
	case byDeadline:
		return 1
	}
	return 2
}
