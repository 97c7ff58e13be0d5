package quota

import "sync/atomic"

// Settler trues up one charge once the response's real usage is known.
type Settler interface {
	// Settle replaces the charge's estimate with actual (tokens; a
	// negative one counts as 0) in every window it was charged to: the
	// difference goes into the bucket the charge went into while that
	// bucket is still counted (a refund makes room, an excess counts
	// against later requests); once it has expired, an excess goes into
	// the current bucket and a refund is dropped. The first call counts;
	// later ones do nothing. Safe for concurrent use.
	Settle(actual int64)
}

// noop is the Settler of a charge that charged nothing.
type noop struct{}

func (noop) Settle(int64) {}

// settler is one charge's record: the entries, the buckets and what each
// window was charged (the estimate, clamped to each limit).
type settler struct {
	q       *Quotas
	done    atomic.Bool
	n       int
	cur     [2]int64 // the bucket charged, per window
	e       [3]*entry
	charged [3][2]int64
}

func (s *settler) Settle(actual int64) {
	if s.done.Swap(true) {
		return
	}
	actual = max(actual, 0)
	q := s.q
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	now = q.clockLocked(now)
	for i, e := range s.e[:s.n] {
		if e.gone {
			continue // forgotten since: nothing to true up
		}
		for w, g := range windows {
			e.w[w].settle(g, g.index(now), s.cur[w], actual-s.charged[i][w])
		}
	}
}

// settle adds delta to bucket b while it is counted (a refund never below
// zero); once it expired, a positive delta goes into the current bucket
// cur and a refund is dropped.
func (r *ring) settle(g geometry, cur, b, delta int64) {
	oldest := g.oldest(cur)
	r.trim(oldest)
	switch {
	case b >= oldest:
		if delta < 0 {
			delta = max(delta, -r.get(b))
		}
		r.add(b, delta)
	case delta > 0:
		r.add(cur, delta)
	}
}
