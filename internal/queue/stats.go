package queue

import (
	stdheap "container/heap" // the package's own heap type holds waiters
	"slices"
)

// Stats is a snapshot of a queue. It shares nothing with the queue.
type Stats struct {
	// Length is how many requests wait.
	Length int
	// Tokens is the sum of the waiters' estimated tokens.
	Tokens int64
	// Order is EarliestDeadline when some window serves by deadline, else
	// ShortestFirst when some window serves shortest first.
	Order Order
	// ByPriority counts the waiters of each priority present.
	ByPriority map[int]int
	// Windows lists every window, sorted by name.
	Windows []WindowStats
	// Tenants lists at most MaxTenantStats tenants (one entry per tenant
	// and priority): those with the most waiters first, then the highest
	// counter, then by priority and name, so the backlogged ones come
	// first. Nil while no tenant is remembered.
	Tenants []TenantStats
	// TenantCount is how many tenants (and priorities) are remembered: those
	// with waiters or requests in flight, and up to Settings.MaxTenants idle.
	TenantCount int
}

// maxTenantStats is the most tenants a Stats snapshot lists.
const maxTenantStats = 64

// TenantStats is one tenant's share of one priority in a Stats snapshot.
type TenantStats struct {
	Tenant   string
	Priority int
	// Weight is the weight of its latest request (at least 1 where that was
	// 0 or less).
	Weight float64
	// Counter is its virtual tokens: service ÷ weight, lifted when it
	// becomes backlogged (already divided by the weight).
	Counter float64
	// Waiting is how many of its requests wait; InFlight how many hold a
	// slot (requests, not sequences).
	Waiting, InFlight int
	// Service is the service charged to it in total, after settles, in the
	// caller's weighted tokens (Request.Service).
	Service int64
}

// WindowStats is one upstream's window in a Stats snapshot.
type WindowStats struct {
	Name string
	// Limit is the most requests the window may run at once.
	Limit int
	// InFlight is how many slots are held (sequences: a request holds
	// Request.Seqs of them); it may exceed Limit after a cut.
	InFlight int
	// MemoryBudget bounds the in-flight requests' Memory (0: no bound);
	// MemoryHeld is theirs.
	MemoryBudget, MemoryHeld int64
	// TokenLimit bounds the in-flight requests' Tokens (0: no bound);
	// TokensHeld is theirs.
	TokenLimit, TokensHeld int64
	// Availability is what the Availability func says now; Down for a
	// removed window that still has slots held.
	Availability Availability
}

// Stats returns a snapshot of the queue.
func (c *Core) Stats() Stats {
	s := Stats{
		Length:  c.fifo.len(),
		Tokens:  c.tokens,
		Order:   c.anyOrder(),
		Windows: make([]WindowStats, len(c.windows)),
	}
	for _, it := range c.waiting {
		if s.ByPriority == nil {
			s.ByPriority = map[int]int{}
		}
		s.ByPriority[it.priority]++
	}
	for i, w := range c.windows {
		s.Windows[i] = WindowStats{Name: w.name, Limit: w.limit, InFlight: w.inflight,
			MemoryBudget: w.budget, MemoryHeld: w.held, TokenLimit: w.tokenLimit, TokensHeld: w.tokens,
			Availability: c.state(w)}
	}
	s.Tenants, s.TenantCount = c.tenantStats(), len(c.tenants)
	return s
}

// tenantStats lists the first MaxTenantStats tenants in Stats.Tenants' order:
// one pass keeping the best of them in a heap (the last of them on top), so
// a snapshot under the queue's lock costs O(tenants × log 64), no sort of
// them all (cmd/gatekeeper takes one every pressure round).
func (c *Core) tenantStats() []TenantStats {
	if len(c.tenants) == 0 {
		return nil
	}
	best := make(listsLast, 0, min(len(c.tenants), maxTenantStats))
	// Newest ids first: lifts make counters grow with time, so the best come
	// early and most of the others lose their one comparison.
	for i := len(c.byID) - 1; i >= 0; i-- {
		switch t := c.byID[i]; {
		case t == nil:
		case len(best) < maxTenantStats:
			stdheap.Push(&best, t)
		case listsBefore(t, best[0]):
			best[0] = t
			stdheap.Fix(&best, 0)
		}
	}
	slices.SortFunc(best, func(a, b *tenant) int {
		if listsBefore(a, b) {
			return -1
		}
		return 1 // keys are unique: no two tenants tie
	})
	out := make([]TenantStats, len(best))
	for i, t := range best {
		out[i] = TenantStats{Tenant: t.key.name, Priority: t.key.priority, Weight: t.weight, Counter: t.counter,
			Waiting: t.waiting, InFlight: t.inflight, Service: t.service}
	}
	return out
}

// listsBefore reports whether a comes before b in Stats.Tenants: more
// waiters, then a higher counter, then by priority and name.
// (Early returns, not cmp.Or: that would compare the names every time.)
func listsBefore(a, b *tenant) bool {
	switch {
	case a.waiting != b.waiting:
		return a.waiting > b.waiting
	case a.counter != b.counter:
		return a.counter > b.counter
	case a.key.priority != b.key.priority:
		return a.key.priority < b.key.priority
	}
	return a.key.name < b.key.name
}

// listsLast is a container/heap of tenants with the one that lists last on
// top: the first to drop when a better one is seen.
type listsLast []*tenant

func (h listsLast) Len() int           { return len(h) }
func (h listsLast) Less(i, j int) bool { return listsBefore(h[j], h[i]) }
func (h listsLast) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *listsLast) Push(x any)        { *h = append(*h, x.(*tenant)) }
func (h *listsLast) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

// anyOrder is EarliestDeadline when some window is in that order, else
// ShortestFirst when some is in that one, else the queue's order.
func (c *Core) anyOrder() Order {
	o := c.order
	for _, w := range c.windows {
		o = stronger(o, w.order)
	}
	return o
}
