package queue

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
	return s
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
