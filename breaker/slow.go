package breaker

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultShedRetryAfter is the Retry-After of a refusal while critical.
const DefaultShedRetryAfter = 2 * time.Second

// ErrOverloaded matches every *OverloadError with errors.Is.
var ErrOverloaded = errors.New("breaker: overloaded")

// OverloadError is Slow.Allow's refusal while the upstream is critical.
type OverloadError struct {
	// Wait is the configured time to come back (SlowSettings.RetryAfter).
	Wait time.Duration
}

// Error returns e.g. "breaker: overloaded, retry after 2s".
func (e *OverloadError) Error() string {
	return fmt.Sprintf("breaker: overloaded, retry after %s", e.RetryAfter())
}

// RetryAfter returns Wait in whole seconds, at least one second.
func (e *OverloadError) RetryAfter() time.Duration { return wholeSeconds(e.Wait) }

// Is reports whether target is ErrOverloaded.
func (e *OverloadError) Is(target error) bool { return target == ErrOverloaded }

// SlowSettings configures a Slow: the slow breaker of one upstream.
type SlowSettings struct {
	// Level holds the rules, hysteresis, hold and stale policy.
	Level LevelSettings
	// Window holds the window bounds, cut and ramp; MaxInflight is required.
	Window WindowSettings
	// RetryAfter is what Allow's refusal carries while critical. 0 means
	// DefaultShedRetryAfter (2s); otherwise > 0 (rounded up to whole seconds).
	RetryAfter time.Duration
	// Now returns the current time for Observe. Nil means time.Now.
	Now func() time.Time
}

func (s SlowSettings) normalized() (SlowSettings, error) {
	errLevel := s.Level.validate()
	w, errWindow := s.Window.normalized()
	var errRetry error
	if s.RetryAfter < 0 {
		errRetry = fmt.Errorf("breaker: SlowSettings.RetryAfter = %v, want ≥ 0", s.RetryAfter)
	}
	if err := errors.Join(errLevel, errWindow, errRetry); err != nil {
		return s, err
	}
	s.Window = w
	s.RetryAfter = cmpOr(s.RetryAfter, DefaultShedRetryAfter)
	if s.Now == nil {
		s.Now = time.Now
	}
	return s, nil
}

// SlowState is what the request path reads: one atomic load.
type SlowState struct {
	// Level is the pressure level; Critical means refuse new work.
	Level Level
	// Phase is the window's phase; PhaseDegraded and PhaseRecovering are
	// when the queue should serve shortest first.
	Phase Phase
	// Limit is the window in requests, within [MinInflight, MaxInflight].
	Limit int
}

func (st SlowState) pack() uint64 {
	return uint64(uint32(st.Limit)) | uint64(uint8(st.Level))<<32 | uint64(uint8(st.Phase))<<40
}

func unpack(v uint64) SlowState {
	return SlowState{Limit: int(uint32(v)), Level: Level(uint8(v >> 32)), Phase: Phase(uint8(v >> 40))}
}

// SlowUpdate is what one Observe changed, for the caller to log, count and
// pass on (queue window, availability, order) exactly once.
type SlowUpdate struct {
	SlowState
	// Transition is the level change, valid when LevelChanged.
	Transition   Transition
	LevelChanged bool
	// LimitChanged and PhaseChanged say Limit or Phase differ from before.
	LimitChanged bool
	PhaseChanged bool
}

// Slow is the slow breaker of one upstream: a LevelMachine feeding a Window,
// published for the request path through an atomic. Create one with
// NewSlow. Safe for concurrent use; must not be copied. Observe calls are
// serialized; Current and Allow never wait for them.
type Slow struct {
	now func() time.Time

	// mu guards level and window.
	mu     sync.Mutex
	level  *LevelMachine
	window *Window

	state    atomic.Uint64                 // packed SlowState
	overload atomic.Pointer[OverloadError] // shared, immutable refusal
}

// NewSlow returns a Slow at Normal with the window at MaxInflight, or an
// error naming each invalid field of s.
func NewSlow(s SlowSettings) (*Slow, error) {
	s, err := s.normalized()
	if err != nil {
		return nil, err
	}
	lm, err := NewLevelMachine(s.Level)
	if err != nil {
		return nil, err
	}
	sl := &Slow{now: s.Now, level: lm, window: &Window{s: s.Window, limit: s.Window.MaxInflight}}
	sl.state.Store(SlowState{Level: Normal, Phase: PhaseNormal, Limit: s.Window.MaxInflight}.pack())
	sl.overload.Store(&OverloadError{Wait: s.RetryAfter})
	return sl, nil
}

// Current returns the latest level, phase and window. It is one atomic load.
func (sl *Slow) Current() SlowState { return unpack(sl.state.Load()) }

// Allow returns nil unless the upstream is critical, and then an
// *OverloadError: new work for it is refused with 503 and Retry-After.
func (sl *Slow) Allow() error {
	if Level(uint8(sl.state.Load()>>32)) == Critical {
		return sl.overload.Load()
	}
	return nil
}

// Observe feeds one round of readings (see LevelMachine.Observe) and the
// backlog state (see WindowInput.BacklogEmpty) at the current time.
func (sl *Slow) Observe(readings []Reading, backlogEmpty bool) SlowUpdate {
	return sl.ObserveAt(sl.now(), readings, backlogEmpty)
}

// ObserveAt is Observe at an explicit instant, for callers on a virtual clock.
func (sl *Slow) ObserveAt(now time.Time, readings []Reading, backlogEmpty bool) SlowUpdate {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	before := sl.Current()
	tr, changed := sl.level.Observe(now, readings)
	signal, value := sl.level.Cause()
	limit, phase := sl.window.Tick(now, WindowInput{
		Level: sl.level.Level(), Signal: signal, Value: value, BacklogEmpty: backlogEmpty,
	})
	after := SlowState{Level: sl.level.Level(), Phase: phase, Limit: limit}
	sl.state.Store(after.pack())
	return SlowUpdate{
		SlowState:    after,
		Transition:   tr,
		LevelChanged: changed,
		LimitChanged: after.Limit != before.Limit,
		PhaseChanged: after.Phase != before.Phase,
	}
}

// Update applies a reloaded policy. The level, phase and cut history carry
// over; the window is clamped into the new bounds (at MaxInflight when
// normal). s.Now is ignored. On error nothing changes.
func (sl *Slow) Update(s SlowSettings) error {
	s, err := s.normalized()
	if err != nil {
		return err
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.level.update(s.Level)
	sl.window.update(s.Window)
	st := sl.Current()
	st.Limit = sl.window.Limit()
	sl.state.Store(st.pack())
	sl.overload.Store(&OverloadError{Wait: s.RetryAfter})
	return nil
}
