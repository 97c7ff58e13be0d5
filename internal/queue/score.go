package queue

// Scorer ranks the windows a request may take: gatekeeper's pod choice
// (internal/route). The queue asks it only of windows that are available,
// have room and fit the request, so a pod the slow breaker refuses is never
// scored. It is called with the Core's caller's locks held: it must not
// call back into the queue.
type Scorer interface {
	// Score says how well the window named upstream, holding inflight of
	// limit slots, suits a request with the prefix blocks given; higher is
	// better. It must not change what it scores.
	Score(upstream string, inflight, limit int, prefix []uint64) float64
	// Chose says that a request with the prefix blocks given was granted a
	// slot on upstream.
	Chose(upstream string, prefix []uint64)
}

// SetScorer sets the Scorer that chooses between windows with room (nil:
// the window with the most room, as before). Call Dispatch afterwards.
func (c *Core) SetScorer(s Scorer) { c.scorer = s }

// chose tells the Scorer, if any, where a request with prefix went.
func (c *Core) chose(w *window, prefix []uint64) {
	if c.scorer != nil {
		c.scorer.Chose(w.name, prefix)
	}
}
