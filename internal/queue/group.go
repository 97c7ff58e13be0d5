package queue

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// group is the waiters of one tenant (and priority) that may use the same
// windows (the same Exclude list): a pool of pods. Each group has its own
// order, shortest first when any window it may use is (SetWindowOrder), so
// one pool under pressure does not reorder another's queue.
type group struct {
	key      groupID
	exclude  []string // the members' shared Exclude list
	tenant   *tenant  // whose waiters they are
	slot     int      // its index in tenant.groups; -1 when out
	fifo     heap     // its waiters, oldest first (after priority)
	size     heap     // its waiters, fewest tokens first (after priority)
	deadline heap     // its waiters, earliest deadline first (after priority)
}

// groupID names a group: its exclude list (groupKey) and its tenant.
type groupID struct {
	exclude string
	tenant  tenantKey
}

// String is the group's name in test failures: tenant@priority/excluded,…
func (k groupID) String() string {
	return k.tenant.name + "@" + strconv.Itoa(k.tenant.priority) + "/" + strings.ReplaceAll(k.exclude, "\x00", ",")
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

// groupFor returns the group of t's requests excluding exclude, creating
// it; link puts a new one in the index.
func (c *Core) groupFor(exclude []string, t *tenant) *group {
	k := groupID{exclude: groupKey(exclude), tenant: t.key}
	if g := c.groups[k]; g != nil {
		return g
	}
	return &group{key: k, exclude: exclude, tenant: t, slot: -1, fifo: heap{kind: groupArrival},
		size: heap{kind: groupSize}, deadline: heap{kind: groupDeadline}}
}

// orderOf is the order of the waiters that exclude exclude (a group's):
// EarliestDeadline when some window they may use is in that order, else
// ShortestFirst when some is in that one, else FIFO (SetWindowOrder).
func (c *Core) orderOf(exclude []string) Order {
	o := FIFO
	for _, w := range c.windows {
		if !w.removed && !slices.Contains(exclude, w.name) {
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
	switch c.orderOf(g.exclude) {
	case EarliestDeadline:
		return g.deadline.top(), byDeadline
	case ShortestFirst:
		if now.Sub(oldest.arrival) < c.s.StarvationAfter {
			return g.size.top(), bySize
		}
	}
	return oldest, byAge
}

// next returns the waiter to consider first at now: of the highest
// priority waiting, the tenant with the least counter (ties: the one whose
// oldest waiter arrived first), and of that tenant's groups' heads an aged
// or FIFO head before a deadline head before a shortest-first one, the
// earlier deadline between two deadline heads, the fewer tokens between two
// shortest-first heads, the older otherwise. With every window in one order
// this is the order of one queue; with one tenant, that of the queue
// without tenants (priority first, then those rules across all groups).
// The cost is a map lookup and a pass over the one tenant's groups.
func (c *Core) next(now time.Time) *item {
	top := c.fifo.top()
	if top == nil {
		return nil
	}
	t := c.levels[top.priority].backlog.top()
	if t == nil { // its tenants are set aside at their shares (grant): the next priority's go
		var l *level
		lp := 0
		for p, lv := range c.levels {
			if lv.backlog.len() > 0 && p < top.priority && (l == nil || p > lp) {
				l, lp = lv, p
			}
		}
		if l == nil {
			return nil
		}
		t = l.backlog.top()
	}
	var best *item
	var bestKind headKind
	for _, g := range t.groups {
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
