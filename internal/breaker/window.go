package breaker

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Window defaults.
const (
	defaultCut       = 0.2
	defaultCutEvery  = 2 * time.Second
	defaultWorsening = 0.01
	defaultRampStep  = 0.1
	defaultRampEvery = time.Second
)

// Phase is where an upstream's batch window stands.
type Phase int

// Window phases.
const (
	PhaseNormal     Phase = iota // window at MaxInflight
	PhaseDegraded                // cut, and cut again while the cause worsens
	PhaseCritical                // cut once more; new work is refused
	PhaseRecovering              // level normal again; ramping up, backlog draining
)

// String returns "normal", "degraded", "critical" or "recovering".
func (p Phase) String() string {
	switch p {
	case PhaseNormal:
		return "normal"
	case PhaseDegraded:
		return "degraded"
	case PhaseCritical:
		return "critical"
	case PhaseRecovering:
		return "recovering"
	default:
		return fmt.Sprintf("phase(%d)", int(p))
	}
}

// WindowSettings configures a Window. MaxInflight is required; zero values
// of the other fields select the defaults.
type WindowSettings struct {
	// MaxInflight is the largest window, in requests: the pod's
	// max_num_seqs. Required: ≥ 1.
	MaxInflight int
	// MinInflight is the smallest window in requests; cuts stop there.
	// 0 means 1; otherwise 1 to MaxInflight.
	MinInflight int
	// Cut is the fraction taken off the window per cut: 0.2 turns 100 into
	// 80 (rounded down). 0 means DefaultCut (0.2); otherwise 0 < Cut < 1.
	Cut float64
	// CutEvery is the least time between two cuts while degraded and the
	// cause keeps getting worse. 0 means DefaultCutEvery (2s); otherwise > 0.
	CutEvery time.Duration
	// Worsening is how much the cause must have risen since the last cut,
	// as a fraction of its value then, to count as getting worse: without
	// it a signal creeping by noise (a fragmentation ratio moving in the
	// fifth digit) cuts the window to its minimum. 0 means
	// DefaultWorsening (1 %, so a KV usage of 0.95 can still be cut at
	// 0.96, 0.97, …); otherwise 0 < Worsening < 1.
	Worsening float64
	// RampStep is the fraction of MaxInflight added per RampEvery while
	// recovering, rounded to the nearest request, at least one. 0 means
	// DefaultRampStep (0.1); otherwise 0 < RampStep ≤ 1.
	RampStep float64
	// RampEvery is the time between two ramp steps. 0 means
	// DefaultRampEvery (1s); otherwise > 0.
	RampEvery time.Duration
	// FailureHold is how long a ceiling that a failure under load set (see
	// Fail) stays after the last such failure; then the window may ramp to
	// MaxInflight again. 0 means for the Window's life (until MaxInflight
	// changes); otherwise > 0.
	FailureHold time.Duration
}

// normalized checks s and fills in the defaults; the error names each
// invalid field.
func (s WindowSettings) normalized() (WindowSettings, error) {
	var errs []error
	bad := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("breaker: WindowSettings.%s = %v, want %s", field, v, want))
	}
	if s.MaxInflight < 1 || s.MaxInflight > math.MaxInt32 {
		bad("MaxInflight", s.MaxInflight, "1 to 2147483647")
	}
	if s.MinInflight < 0 || s.MaxInflight >= 1 && s.MinInflight > s.MaxInflight {
		bad("MinInflight", s.MinInflight, fmt.Sprintf("0 to MaxInflight (%d)", s.MaxInflight))
	}
	if !(s.Cut >= 0 && s.Cut < 1) {
		bad("Cut", s.Cut, "0 ≤ Cut < 1")
	}
	if s.CutEvery < 0 {
		bad("CutEvery", s.CutEvery, "≥ 0")
	}
	if !(s.Worsening >= 0 && s.Worsening < 1) {
		bad("Worsening", s.Worsening, "0 < Worsening < 1, or 0 for the default")
	}
	if !(s.RampStep >= 0 && s.RampStep <= 1) {
		bad("RampStep", s.RampStep, "0 ≤ RampStep ≤ 1")
	}
	if s.RampEvery < 0 {
		bad("RampEvery", s.RampEvery, "≥ 0")
	}
	if s.FailureHold < 0 {
		bad("FailureHold", s.FailureHold, "≥ 0")
	}
	if len(errs) > 0 {
		return s, errors.Join(errs...)
	}
	s.MinInflight = max(s.MinInflight, 1)
	s.Cut = cmpOr(s.Cut, defaultCut)
	s.CutEvery = cmpOr(s.CutEvery, defaultCutEvery)
	s.Worsening = cmpOr(s.Worsening, defaultWorsening)
	s.RampStep = cmpOr(s.RampStep, defaultRampStep)
	s.RampEvery = cmpOr(s.RampEvery, defaultRampEvery)
	return s, nil
}

// WindowInput is one tick's news for a Window.
type WindowInput struct {
	// Level is the upstream's current level.
	Level Level
	// Signal and Value are the level's cause and its latest value
	// (LevelMachine.Cause); a rising Value while degraded cuts again.
	Signal string
	Value  float64
	// BacklogEmpty says no request waits for this upstream. Recovery ends
	// only when the window is full and the backlog is empty; pass true if
	// the caller keeps no backlog.
	BacklogEmpty bool
	// podQueued is how many requests wait inside the pod itself (vLLM's
	// num_requests_waiting); 0 when unknown. While degraded, a pod that
	// queues at least what a cut takes off the window is given more than it
	// runs: the window is cut again (every CutEvery), so those requests wait
	// in the gateway's queue, shortest first, instead of the pod's own.
	podQueued float64
}

// Window is the batch window (most requests in flight) of one upstream. It
// is a pure core: Tick takes now, nothing reads a clock, and it is not safe
// for concurrent use (Slow adds the lock). Create one with NewWindow.
type Window struct {
	s         WindowSettings
	limit     int
	phase     Phase
	lastCut   time.Time // when the window was last cut
	cutSignal string    // the cause at the last cut, and its value then
	cutValue  float64
	lastRamp  time.Time // when recovery began or the window last grew
	// ceiling, when > 0, is the most the window may grow to since the pod
	// failed under load (Fail), set at ceilingAt or refreshed then.
	ceiling   int
	ceilingAt time.Time
}

// NewWindow returns a Window at MaxInflight in PhaseNormal, or an error
// naming each invalid field of s.
func NewWindow(s WindowSettings) (*Window, error) {
	s, err := s.normalized()
	if err != nil {
		return nil, err
	}
	return &Window{s: s, limit: s.MaxInflight}, nil
}

// Limit returns the current window in requests, always within
// [MinInflight, MaxInflight] and at most the ceiling while one holds.
func (w *Window) Limit() int { return w.limit }

// Ceiling returns the ceiling that a failure under load set and when it was
// set or last refreshed; 0 while none holds.
func (w *Window) Ceiling() (int, time.Time) { return w.ceiling, w.ceilingAt }

// Fail records that the pod failed under load at now: it died (an engine
// out-of-memory is fatal: every request in flight fails, then the server)
// while inflight sequences ran on it. When inflight is at least half the
// window, the failure is the load's: the window's ceiling falls to what a
// cut leaves of inflight (at least MinInflight) and the window with it, and
// no ramp passes the ceiling until FailureHold has passed without another
// such failure. A failure at a smaller load (a rolling update, a network
// error) changes nothing. It reports whether the ceiling was set or lowered.
//
// Why a ceiling and not a cut: a cut is ramped back, and growing the batch
// again to a size the pod's caching allocator has not served since its
// restart is what kills a tight pod (sim/replay/README.md); the load the
// pod died at is the one fact known to be too much.
func (w *Window) Fail(now time.Time, inflight int) bool {
	if inflight < 1 || 2*inflight < w.limit {
		return false
	}
	c := w.afterCut(inflight)
	lowered := w.ceiling == 0 || c < w.ceiling
	if lowered {
		w.ceiling = c
	}
	w.ceilingAt = now
	w.limit = min(w.limit, w.ceiling)
	return lowered
}

// top is the most the window may grow to now: MaxInflight, or the ceiling
// while one holds.
func (w *Window) top() int {
	if w.ceiling > 0 {
		return min(w.ceiling, w.s.MaxInflight)
	}
	return w.s.MaxInflight
}

// Phase returns the current phase.
func (w *Window) Phase() Phase { return w.phase }

// Tick moves the window for the input at now and returns the new limit and
// phase. Call it on every pressure reading, and more often if you like:
// cuts and ramp steps follow elapsed time, not the number of calls.
//
// Entering degraded cuts by Cut; while degraded, a Value above the one at
// the last cut (same Signal) by more than Worsening, or a pod that queues
// at least a cut's worth of requests itself (PodQueued), cuts again once
// CutEvery has passed. Entering
// critical cuts once more (twice when coming straight from normal or
// recovering). Back at normal the window ramps up by RampStep×MaxInflight
// every RampEvery and the phase is recovering until the window is full and
// the backlog is empty.
func (w *Window) Tick(now time.Time, in WindowInput) (limit int, phase Phase) {
	if w.ceiling > 0 && w.s.FailureHold > 0 && now.Sub(w.ceilingAt) >= w.s.FailureHold {
		w.ceiling, w.ceilingAt = 0, time.Time{} // held long enough: the window may grow back
		if w.phase == PhaseNormal && w.limit < w.s.MaxInflight {
			w.phase, w.lastRamp = PhaseRecovering, now
		}
	}
	switch in.Level {
	case Critical:
		if w.phase != PhaseCritical {
			if w.phase != PhaseDegraded {
				w.cut(now, in)
			}
			w.cut(now, in)
			w.phase = PhaseCritical
		}
	case Degraded:
		switch w.phase {
		case PhaseNormal, PhaseRecovering:
			w.cut(now, in)
		case PhaseDegraded:
			if in.Signal != w.cutSignal {
				w.cutSignal, w.cutValue = in.Signal, in.Value // a new cause sets a new baseline
			} else if (w.worse(in.Value) || w.overfed(in.podQueued)) && now.Sub(w.lastCut) >= w.s.CutEvery {
				w.cut(now, in)
			}
		}
		w.phase = PhaseDegraded
	default:
		w.recover(now, in.BacklogEmpty)
	}
	return w.limit, w.phase
}

// overfed reports whether the pod queues at least what a cut would take off
// the window (one request at least): the window then holds more than the
// pod runs, and cutting it takes nothing from the batch the pod runs.
func (w *Window) overfed(podQueued float64) bool {
	return podQueued >= max(1, float64(w.limit)*w.s.Cut)
}

// worse reports whether v has risen past the value at the last cut by the
// Worsening margin.
func (w *Window) worse(v float64) bool {
	return v > w.cutValue+math.Abs(w.cutValue)*w.s.Worsening
}

func (w *Window) cut(now time.Time, in WindowInput) {
	w.limit = w.afterCut(w.limit)
	w.lastCut, w.cutSignal, w.cutValue = now, in.Signal, in.Value
}

// afterCut is what one cut leaves of a window of n: n less Cut, rounded
// down, at least MinInflight.
func (w *Window) afterCut(n int) int {
	return max(w.s.MinInflight, int(math.Floor(float64(n)*(1-w.s.Cut))))
}

func (w *Window) recover(now time.Time, backlogEmpty bool) {
	switch w.phase {
	case PhaseDegraded, PhaseCritical:
		w.phase, w.lastRamp = PhaseRecovering, now
	case PhaseRecovering:
		top := w.top()
		if steps := now.Sub(w.lastRamp) / w.s.RampEvery; steps > 0 && w.limit < top {
			step := max(1, int(math.Round(w.s.RampStep*float64(w.s.MaxInflight))))
			grow := min(int64(steps), int64(w.s.MaxInflight)) * int64(step)
			w.limit = int(min(int64(w.limit)+grow, int64(top)))
			w.lastRamp = w.lastRamp.Add(steps * w.s.RampEvery)
		}
	}
	if w.phase == PhaseRecovering && w.limit >= w.top() && backlogEmpty {
		w.phase = PhaseNormal
	}
}

// update applies new settings, keeping the phase and clamping the window.
// A ceiling stays, clamped into the new bounds, unless MaxInflight changed:
// a new maximum is the operator's word on the pod's window.
func (w *Window) update(s WindowSettings) {
	if s.MaxInflight != w.s.MaxInflight {
		w.ceiling, w.ceilingAt = 0, time.Time{}
	}
	w.s = s
	if w.ceiling > 0 {
		w.ceiling = min(max(w.ceiling, s.MinInflight), s.MaxInflight)
	}
	if w.phase == PhaseNormal {
		w.limit = w.top()
	}
	w.limit = min(max(w.limit, s.MinInflight), w.top())
}
