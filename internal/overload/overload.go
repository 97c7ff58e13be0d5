// Package overload sheds new requests when gatekeeper itself is saturated,
// as Envoy's overload manager does: when its own CPU cannot keep up, every
// request it accepts waits longer, so it refuses the excess at once (503
// with Retry-After) instead of letting every request's latency grow without
// bound (issue 38).
//
// The signal is the Go scheduler's own delay: how long goroutines wait
// runnable before they run (runtime/metrics /sched/latencies:seconds, its
// 90th percentile over each 50 ms interval). A process with CPU to spare runs a
// runnable goroutine at once; one that is saturated queues them. The
// Manager moves the share of new requests it sheds by how far that delay is
// from its target, every interval: up fast while above (a backlog, once
// built, makes even refusals slow), down slowly while below (so that the
// load it shed does not come back at once), and so it sheds what the CPU
// cannot serve and little more. It acts on the lower of the
// last two intervals' delays, so that one late interval (a GC cycle, a
// burst of the machine's other work) sheds nothing. A bound on the requests
// in flight may be set beside it.
//
// It reads the probe on the request path, at most once per interval, so it
// needs no goroutine of its own and its state is derived when read.
package overload

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Settings configures a Manager. The zero value sheds nothing.
type Settings struct {
	// SchedDelay is the scheduling delay gatekeeper holds itself to: the
	// 90th percentile of how long its goroutines waited runnable over an
	// interval. Above it the Manager sheds a growing share of new requests;
	// below it a shrinking one. 0: not watched. At least 100µs otherwise.
	SchedDelay time.Duration
	// MaxInflight bounds the requests in flight (admitted, not yet done);
	// the one past it is shed. 0: no bound.
	MaxInflight int
	// Interval is how often the probe is read and the share moved. 0 means
	// 50ms.
	Interval time.Duration
	// Probe returns the scheduling delay's 90th percentile since its last
	// call and how many samples it saw. Nil reads runtime/metrics.
	Probe func() (delay time.Duration, samples uint64)
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
}

// Tuning of the controller; see step.
const (
	defaultInterval = 50 * time.Millisecond
	// gainUp is the share added per interval per unit of relative error
	// (delay ÷ target − 1) above the target: at twice the target, a quarter
	// more is shed after each interval.
	gainUp = 0.25
	// maxError caps one interval's relative error: at most three quarters
	// more per interval.
	maxError = 3.0
	// gainDown is the share taken off per interval per unit of relative
	// error below the target: at most a sixteenth (all of it in 0.8 s).
	gainDown = 1.0 / 16
	// minSamples is the fewest scheduler samples an interval needs to say
	// anything: a nearly idle process is not saturated (the runtime samples
	// one goroutine transition in eight).
	minSamples = 64
	// scale is the fixed-point unit of the shed share.
	scale = 1 << 10
)

// Manager decides whether a new request may go on. Create one with New; it
// is safe for concurrent use and must not be copied.
type Manager struct {
	s     Settings
	probe func() (time.Duration, uint64)
	now   func() time.Time

	inflight atomic.Int64
	seq      atomic.Uint64 // requests asked about, spreads the shed ones evenly
	shed     atomic.Uint32 // share of new requests shed, in 1/scale
	next     atomic.Int64  // when the probe is read next, Unix ns

	mu   sync.Mutex // guards frac and last; tried, never waited for, on the request path
	frac float64
	last time.Duration // the previous interval's delay (0 when it was idle)
}

// New builds a Manager from s.
func New(s Settings) (*Manager, error) {
	var errs []error
	if s.SchedDelay < 0 || s.SchedDelay > 0 && s.SchedDelay < 100*time.Microsecond {
		errs = append(errs, errors.New("overload: SchedDelay must be 0 or at least 100µs"))
	}
	if s.MaxInflight < 0 {
		errs = append(errs, errors.New("overload: MaxInflight must be at least 0"))
	}
	if s.Interval < 0 {
		errs = append(errs, errors.New("overload: Interval must be at least 0"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if s.Interval == 0 {
		s.Interval = defaultInterval
	}
	m := &Manager{s: s, probe: s.Probe, now: s.Now}
	if m.now == nil {
		m.now = time.Now
	}
	if m.probe == nil && s.SchedDelay > 0 {
		m.probe = newSchedProbe().read
	}
	return m, nil
}

// Admit reports whether a new request may go on. When it may, the caller
// must call Done exactly once when the request ends.
func (m *Manager) Admit() bool {
	if m.s.SchedDelay > 0 {
		m.update(m.now())
	}
	n := m.inflight.Add(1)
	if m.s.MaxInflight > 0 && n > int64(m.s.MaxInflight) || m.shedNext() {
		m.inflight.Add(-1)
		return false
	}
	return true
}

// Done ends a request Admit let go on.
func (m *Manager) Done() { m.inflight.Add(-1) }

// Shedding returns the share of new requests shed now, 0 to 1.
func (m *Manager) Shedding() float64 { return float64(m.shed.Load()) / scale }

// Inflight returns the requests admitted and not yet done.
func (m *Manager) Inflight() int { return int(m.inflight.Load()) }

// shedNext reports whether this request is one of the shed share: of every
// scale requests, the share's count, spread evenly (no randomness).
func (m *Manager) shedNext() bool {
	q := uint64(m.shed.Load())
	if q == 0 {
		return false
	}
	n := m.seq.Add(1)
	return n*q/scale != (n-1)*q/scale
}

// update reads the probe and moves the share once the interval has passed.
// The first request past it does; the others go on without waiting.
func (m *Manager) update(now time.Time) {
	if now.UnixNano() < m.next.Load() || !m.mu.TryLock() {
		return
	}
	defer m.mu.Unlock()
	if now.UnixNano() < m.next.Load() { // another request just did
		return
	}
	m.next.Store(now.Add(m.s.Interval).UnixNano())
	delay, samples := m.probe()
	if samples < minSamples { // too few to say anything: idle
		delay = 0
	}
	m.frac = step(m.frac, min(delay, m.last), m.s.SchedDelay)
	m.last = delay
	m.shed.Store(uint32(m.frac * scale))
}

// step moves the shed share by how far delay is from target: an integral
// controller, which settles where the delay meets the target, shedding
// what the CPU cannot serve; it rises faster than it falls.
func step(frac float64, delay, target time.Duration) float64 {
	e := min(float64(delay)/float64(target)-1, maxError)
	g := gainUp
	if e < 0 {
		g = gainDown
	}
	return min(max(frac+g*e, 0), 1)
}
