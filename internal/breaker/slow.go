package breaker

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// SlowSettings configures a Slow: the slow breaker of one upstream.
type SlowSettings struct {
	// Level holds the rules, hysteresis, hold and stale policy.
	Level LevelSettings
	// Window holds the window bounds, cut and ramp; MaxInflight is required.
	Window WindowSettings
	// Now returns the current time for Observe. Nil means time.Now.
	Now func() time.Time
	// QueueSignal names the reading that counts the requests waiting inside
	// the pod (pressure's "waiting", vLLM's num_requests_waiting); its fresh
	// value is the window's WindowInput.PodQueued. "" means none.
	QueueSignal string
}

func (s SlowSettings) normalized() (SlowSettings, error) {
	errLevel := s.Level.validate()
	w, errWindow := s.Window.normalized()
	if err := errors.Join(errLevel, errWindow); err != nil {
		return s, err
	}
	s.Window = w
	if s.Now == nil {
		s.Now = time.Now
	}
	return s, nil
}

// SlowState is what the request path reads: one atomic load.
type SlowState struct {
	// Level is the pressure level; Critical means the upstream takes no new
	// work (the caller refuses it: control.Controller.Critical).
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
// serialized; Current never waits for them.
type Slow struct {
	now func() time.Time

	// mu guards level, window and queueSignal.
	mu          sync.Mutex
	level       *LevelMachine
	window      *Window
	queueSignal string // SlowSettings.QueueSignal

	state atomic.Uint64 // packed SlowState
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
	sl := &Slow{now: s.Now, level: lm, window: &Window{s: s.Window, limit: s.Window.MaxInflight}, queueSignal: s.QueueSignal}
	sl.state.Store(SlowState{Level: Normal, Phase: PhaseNormal, Limit: s.Window.MaxInflight}.pack())
	return sl, nil
}

// Current returns the latest level, phase and window. It is one atomic load.
func (sl *Slow) Current() SlowState { return unpack(sl.state.Load()) }

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
		podQueued: sl.podQueued(readings),
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

// Fail records a failure of the pod under load at now with inflight
// sequences running (see Window.Fail) and reports whether it set or lowered
// the window's ceiling; the window falls to the ceiling at once.
func (sl *Slow) Fail(now time.Time, inflight int) bool {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	lowered := sl.window.Fail(now, inflight)
	st := sl.Current()
	st.Limit = sl.window.Limit()
	sl.state.Store(st.pack())
	return lowered
}

// Ceiling returns the window's ceiling since a failure under load and when
// it was set or refreshed (see Window.Ceiling); 0 while none holds.
func (sl *Slow) Ceiling() (int, time.Time) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.window.Ceiling()
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
	sl.queueSignal = s.QueueSignal
	st := sl.Current()
	st.Limit = sl.window.Limit()
	sl.state.Store(st.pack())
	return nil
}

// podQueued is the fresh value of the queue signal among readings, 0 when
// there is none (or it is stale or NaN).
func (sl *Slow) podQueued(readings []Reading) float64 {
	if sl.queueSignal == "" {
		return 0
	}
	for _, r := range readings {
		if r.Signal == sl.queueSignal && !r.Stale && !math.IsNaN(r.Value) {
			return r.Value
		}
	}
	return 0
}
