package control

import (
	"sync"
	"time"
)

// The built-in PodOverload rule: a pod that answered PodOverloadAnswers
// requests 503 or 429 itself within PodOverloadWindow is degraded (its
// window cut by batch.cut), decided at the answer that made the count,
// not at the next pressure round, however short the burst.
//
// Why answers, and why three within a second. vLLM refuses at admission
// (--max-num-queued-reqs: running plus waiting at the cap) synchronously,
// in milliseconds, before the engine sees the request. So a burst above
// what the pod accepts comes back as a clump of refusals, one for each
// request sent while the pod is full, and gatekeeper sends its next waiter
// the moment a refused request gives its slot back: three arrive within
// milliseconds of the burst's start, however short it is, and a second is
// far more than they need. A lone refusal is what the edge of the cap
// looks like (vLLM shares the cap among its API server processes only
// approximately; a rate limiter in front of a pod answers 429 now and
// then), and it is retried once on another pod already: it is not worth
// cutting the window for pressure.hold. A pod refusing more slowly than
// three a second is not degraded by this rule; each refusal is still
// retried once elsewhere or passed on with Retry-After.
const (
	// PodOverloadAnswers is how many of its own refusals degrade a pod.
	PodOverloadAnswers = 3
	// podOverloadWindow is how close together they must come.
	podOverloadWindow = time.Second
)

// overloadRing is how many refusal times an upstream keeps: counts up to
// it are exact, larger ones read as overloadRing.
const overloadRing = 64

// overload counts one upstream's own refusals by when they came, so the
// PodOverload reading depends on the answers, not on when rounds run. The
// zero value is ready; safe for concurrent use; must not be copied.
type overload struct {
	// mu guards the fields below; held for a scan of the ring, no I/O.
	mu   sync.Mutex
	at   [overloadRing]time.Time // the latest refusals (zero: none yet)
	next int                     // the slot the next refusal takes
	// peak is the most refusals within PodOverloadWindow at any refusal
	// since the last read.
	peak int
}

// add records a refusal at now and returns how many came within
// PodOverloadWindow of now, this one included.
func (o *overload) add(now time.Time) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.at[o.next] = now
	o.next = (o.next + 1) % overloadRing
	n := o.countLocked(now)
	o.peak = max(o.peak, n)
	return n
}

// read is a round's PodOverload reading: the most refusals within
// PodOverloadWindow at any moment since the previous read (a burst that
// came and went between rounds is not missed), or within the window
// before now if that is more. It starts the next period.
func (o *overload) read(now time.Time) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := max(o.peak, o.countLocked(now))
	o.peak = 0
	return n
}

// countLocked counts the refusals after now − PodOverloadWindow. The ring
// is scanned whole: refusals recorded concurrently may be slightly out of
// order. o.mu is held.
func (o *overload) countLocked(now time.Time) int {
	from := now.Add(-podOverloadWindow)
	n := 0
	for _, t := range o.at {
		if !t.IsZero() && t.After(from) {
			n++
		}
	}
	return n
}
