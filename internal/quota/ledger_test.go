package quota

import (
	"sync"
	"time"
)

// ledger records what a test admitted against one quota, in the order the
// Quotas decided, to check the bound of the package comment:
//
//	for every true sliding window of length W, the requests admitted in it
//	really use at most Q + Σ max(0, actual − charge) over those of them in
//	flight when the last of them was admitted.
//
// Order is a key: an admission's and a settle's. Admissions that share a
// key are unordered among themselves (they raced), but no settle has
// their key: a settle with a greater key came after all of them, one with
// a smaller key before. Safe for concurrent use.
type ledger struct {
	mu   sync.Mutex
	rows []*admitted // by key
}

// admitted is one admitted request.
type admitted struct {
	at      time.Time
	key     int64 // the admission's order
	charge  int64 // what the window was charged: the estimate, clamped
	actual  int64 // what it really uses (decided when it starts)
	settled int64 // the settle's order; 0: in flight
}

// admit records an admission; keys must not decrease.
func (l *ledger) admit(a *admitted) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rows = append(l.rows, a)
}

// settle records that a settled at order key.
func (l *ledger) settle(a *admitted, key int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a.settled = key
}

// window returns, for the true sliding window of length w that ends at
// now, what the requests admitted in it really use and the bound on it
// (limit plus the underestimates of those of them in flight at the last
// admission), and the charges of those in flight then.
func (l *ledger) window(now time.Time, w time.Duration, limit int64) (used, bound, inFlight int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var in []*admitted
	for i := len(l.rows) - 1; i >= 0 && l.rows[i].at.After(now.Add(-w)); i-- {
		if !l.rows[i].at.After(now) {
			in = append(in, l.rows[i])
		}
	}
	last := int64(-1)
	for _, a := range in {
		last = max(last, a.key)
	}
	bound = limit
	for _, a := range in {
		used += a.actual
		if a.settled == 0 || a.settled > last {
			bound += max(0, a.actual-a.charge)
			inFlight += a.charge
		}
	}
	return used, bound, inFlight
}
