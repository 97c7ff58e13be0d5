package pods

import (
	"sync/atomic"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
)

// errorGate is a pod's error breaker that the registry built, kept by pod
// name across a Set whose settings for it did not change.
type errorGate struct {
	b *breaker.ErrorBreaker
	s breaker.ErrorSettings // as given, OnChange aside
	// member is the pod's current member: a transition republishes its
	// availability (a Set that keeps the breaker moves it to the new one).
	member atomic.Pointer[Member]
}

// sameErrorSettings compares the tunables of two error breaker settings
// (OnChange, a func, is not comparable and is always the registry's).
func sameErrorSettings(a, b breaker.ErrorSettings) bool {
	return a.Failures == b.Failures && a.OpenFor == b.OpenFor && a.HalfOpenRequests == b.HalfOpenRequests
}

// errorGate returns the error breaker of the pod named name for settings
// s: the one it had while s is unchanged, a new one otherwise; nil when s
// is refused (Options.BreakerInvalid hears why; the pod runs without one).
// Every transition republishes the pod's availability, then reaches
// Options.BreakerChanged, outside every lock. The caller holds r.mu.
func (r *Registry) errorGate(name string, s breaker.ErrorSettings) *errorGate {
	if old, ok := r.gates[name]; ok && sameErrorSettings(old.s, s) {
		return old
	}
	g := &errorGate{s: s}
	s.OnChange = func(from, to breaker.State) {
		if m := g.member.Load(); m != nil {
			m.publish()
		}
		if r.opts.BreakerChanged != nil {
			r.opts.BreakerChanged(name, from, to)
		}
	}
	b, err := breaker.NewErrorBreaker(s)
	if err != nil {
		if r.opts.BreakerInvalid != nil {
			r.opts.BreakerInvalid(name, err)
		}
		return nil
	}
	g.b = b
	return g
}

// publishing is the Gate the registry hands out (Member.Gate): the pod's
// breaker, whose every admitted probe and probe's result republish the
// pod's availability (a half-open breaker whose probes are all out pauses
// the pod without a transition). While the breaker is closed it adds one
// atomic load to Allow and allocates nothing.
type publishing struct {
	g Gate
	m *Member
}

func (p publishing) Admits() (breaker.State, bool) { return p.g.Admits() }

func (p publishing) OpenRemaining() time.Duration { return p.g.OpenRemaining() }

func (p publishing) Allow() (func(Result), error) {
	done, err := p.g.Allow()
	if err == nil && p.m.settled() {
		return done, nil // closed: a transition its result causes republishes
	}
	p.m.republish()
	if err != nil {
		return nil, err
	}
	return func(r Result) {
		done(r)
		p.m.republish()
	}, nil
}

// BreakerState is the state of the pod's error breaker (asking a breaker
// the registry built delivers a transition it reveals, as
// breaker.ErrorBreaker.State does); false when the pod is unknown or has
// none.
func (r *Registry) BreakerState(name string) (breaker.State, bool) {
	m, ok := r.Get(name)
	switch {
	case !ok || m.gate == nil:
		return 0, false
	case m.eg != nil:
		return m.eg.b.State(), true
	}
	st, _ := m.gate.Admits()
	return st, true
}
