package breaker

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// ErrorBreaker defaults.
const (
	defaultFailures         = 5
	defaultOpenFor          = 10 * time.Second
	defaultHalfOpenRequests = 2
)

// Errors returned by ErrorBreaker.Allow. Callers skip the upstream.
var (
	// errOpen means the breaker is open: the upstream failed recently.
	errOpen = errors.New("breaker: open")
	// errProbing means the breaker is half-open and its probes are all in flight.
	errProbing = errors.New("breaker: half-open, probes in flight")
)

// State is an error breaker's state.
type State int

// Error breaker states.
const (
	Closed   State = iota // requests pass; failures are counted
	HalfOpen              // a few probes pass; one failure reopens
	Open                  // requests are refused until OpenFor has passed
)

// String returns "closed", "half-open" or "open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	default:
		return fmt.Sprintf("state(%d)", int(s))
	}
}

// Outcome is what a request that the breaker let through came to.
type Outcome int

// Request outcomes.
const (
	// Success: the upstream answered (anything but a 5xx or a connection error).
	Success Outcome = iota
	// Failure: a connection error or a 5xx from the upstream.
	Failure
	// Excluded: counts as neither, e.g. the client went away.
	Excluded
)

// String returns "success", "failure" or "excluded".
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Excluded:
		return "excluded"
	default:
		return fmt.Sprintf("outcome(%d)", int(o))
	}
}

// ErrorSettings configures an ErrorBreaker. The zero value selects the defaults.
type ErrorSettings struct {
	// Failures is how many consecutive failures open the breaker.
	// 0 means DefaultFailures (5); otherwise ≥ 1.
	Failures int
	// OpenFor is how long an open breaker refuses before it lets probes
	// through. 0 means DefaultOpenFor (10s); otherwise > 0.
	OpenFor time.Duration
	// HalfOpenRequests is how many probes a half-open breaker lets through;
	// that many successes in a row close it, one failure reopens it.
	// 0 means DefaultHalfOpenRequests (2); otherwise 1 to 2³²−1.
	HalfOpenRequests int
	// OnChange, if set, is called once per transition, in order, outside
	// any lock, on the goroutine of the call that caused or observed it. It
	// may call State.
	OnChange func(from, to State)
}

// ErrorBreaker is the per-upstream circuit breaker fed by request outcomes.
// It wraps gobreaker's TwoStepCircuitBreaker, which reads time.Now itself:
// test code that needs time to pass runs inside testing/synctest. Create one
// with NewErrorBreaker. Safe for concurrent use; must not be copied.
type ErrorBreaker struct {
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]
	probes   uint32 // HalfOpenRequests, defaults applied
	openFor  time.Duration
	onChange func(from, to State)
	// openedAt is when the breaker last opened (UnixNano, time.Now as
	// gobreaker reads it); 0 before it first opens.
	openedAt atomic.Int64

	// mu guards pending and delivering. gobreaker calls record with its own
	// lock held, so mu is only ever taken inside it, never around it.
	mu         sync.Mutex
	pending    []transition
	delivering bool
}

type transition struct{ from, to State }

// outcome errors handed to gobreaker.
var (
	errFailed   = errors.New("breaker: upstream failed")
	errExcluded = errors.New("breaker: excluded")
)

// NewErrorBreaker returns an ErrorBreaker for s, or an error naming each
// invalid field.
func NewErrorBreaker(s ErrorSettings) (*ErrorBreaker, error) {
	var errs []error
	bad := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("breaker: ErrorSettings.%s = %v, want %s", field, v, want))
	}
	if s.Failures < 0 || uint64(s.Failures) > math.MaxUint32 {
		bad("Failures", s.Failures, "0 to 4294967295")
	}
	if s.OpenFor < 0 {
		bad("OpenFor", s.OpenFor, "≥ 0")
	}
	if s.HalfOpenRequests < 0 || uint64(s.HalfOpenRequests) > math.MaxUint32 {
		bad("HalfOpenRequests", s.HalfOpenRequests, "0 to 4294967295")
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	failures := uint32(cmpOr(s.Failures, defaultFailures))
	b := &ErrorBreaker{onChange: s.OnChange, probes: uint32(cmpOr(s.HalfOpenRequests, defaultHalfOpenRequests)),
		openFor: cmpOr(s.OpenFor, defaultOpenFor)}
	gs := gobreaker.Settings{
		MaxRequests:   b.probes,
		Timeout:       b.openFor,
		ReadyToTrip:   func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		IsExcluded:    func(err error) bool { return err == errExcluded },
		OnStateChange: b.record,
	}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gs)
	return b, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Allow reports whether a request may go to the upstream. When err is nil
// the caller must call done once with the request's outcome; later calls are
// ignored. err is ErrOpen or ErrProbing.
func (b *ErrorBreaker) Allow() (done func(Outcome), err error) {
	report, err := b.cb.Allow()
	b.deliver()
	switch {
	case errors.Is(err, gobreaker.ErrOpenState):
		return nil, errOpen
	case errors.Is(err, gobreaker.ErrTooManyRequests):
		return nil, errProbing
	case err != nil:
		return nil, fmt.Errorf("breaker: %w", err)
	}
	var called atomic.Bool
	return func(o Outcome) {
		if called.Swap(true) {
			return
		}
		switch o {
		case Success:
			report(nil)
		case Excluded:
			report(errExcluded)
		default: // Failure, and anything unknown: never hide a failure
			report(errFailed)
		}
		b.deliver()
	}, nil
}

// State returns the current state. An open breaker whose OpenFor has passed
// reads as half-open.
func (b *ErrorBreaker) State() State {
	s := fromGobreaker(b.cb.State())
	b.deliver()
	return s
}

// Admits returns the current state (see State) and whether Allow would let
// a request through now: closed, or half-open with a probe still free. A
// half-open breaker whose probes are all out admits nothing until one of
// them reports: callers wait for that verdict rather than give up. Unlike
// State it never calls OnChange: it is asked under the admission queue's
// lock, where no callback may run; a transition it reveals (open to
// half-open) is delivered by the next Allow, State or done.
func (b *ErrorBreaker) Admits() (State, bool) {
	s := fromGobreaker(b.cb.State())
	ok := s == Closed
	if s == HalfOpen {
		ok = b.cb.Counts().Requests < b.probes
	}
	return s, ok
}

func fromGobreaker(s gobreaker.State) State {
	switch s {
	case gobreaker.StateOpen:
		return Open
	case gobreaker.StateHalfOpen:
		return HalfOpen
	default:
		return Closed
	}
}

// OpenRemaining is how long an open breaker still refuses before it lets a
// probe through: what a client refused for it should wait (Retry-After).
// 0 when it is not open.
func (b *ErrorBreaker) OpenRemaining() time.Duration {
	if b.cb.State() != gobreaker.StateOpen {
		return 0
	}
	left := b.openFor - time.Since(time.Unix(0, b.openedAt.Load()))
	return max(left, 0)
}

// record queues a transition; gobreaker calls it with its lock held.
func (b *ErrorBreaker) record(_ string, from, to gobreaker.State) {
	if to == gobreaker.StateOpen {
		b.openedAt.Store(time.Now().UnixNano()) // gobreaker's own clock: its expiry is now + OpenFor
	}
	if b.onChange == nil {
		return
	}
	b.mu.Lock()
	b.pending = append(b.pending, transition{fromGobreaker(from), fromGobreaker(to)})
	b.mu.Unlock()
}

// deliver calls OnChange for queued transitions, outside every lock. One
// goroutine delivers at a time so callbacks arrive in order; transitions
// queued meanwhile are picked up by the goroutine already delivering. The
// empty check and the end of delivering share one critical section, so no
// transition is left behind.
func (b *ErrorBreaker) deliver() {
	if b.onChange == nil {
		return
	}
	b.mu.Lock()
	if b.delivering {
		b.mu.Unlock()
		return
	}
	b.delivering = true
	b.mu.Unlock()
	finished := false
	defer func() { // when OnChange panics, so delivery is not stuck for good
		if !finished {
			b.mu.Lock()
			b.delivering = false
			b.mu.Unlock()
		}
	}()
	for {
		b.mu.Lock()
		if len(b.pending) == 0 {
			b.pending = nil
			b.delivering = false
			b.mu.Unlock()
			finished = true
			return
		}
		t := b.pending[0]
		b.pending = b.pending[1:]
		b.mu.Unlock()
		b.onChange(t.from, t.to)
	}
}
