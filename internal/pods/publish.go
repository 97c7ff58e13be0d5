package pods

import (
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// published is a pod's availability as last decided: immutable, replaced
// whole. An open error breaker lets a probe through once its open time has
// passed, without a transition anyone is told of (nothing runs a timer):
// the snapshot records when (probeAt), and from then on reads as then.
type published struct {
	now     queue.Availability
	probeAt int64 // UnixNano after which then holds; 0: never
	then    queue.Availability
	// settled: no error breaker, or a closed one: a request's Allow and
	// result change nothing here (a transition republishes).
	settled bool
}

// at is the availability the snapshot gives at now.
func (p *published) at(now time.Time) queue.Availability {
	if p.probeAt != 0 && now.UnixNano() > p.probeAt {
		return p.then
	}
	return p.now
}

// decide works out m's availability from its health, its error breaker
// and its pressure level. It reads the breaker's state and the levels
// (their own short locks or atomics) and calls nothing back.
func (r *Registry) decide(m *Member) published {
	paused := r.critical(m) && !r.observe.Load()
	p := published{settled: true, now: queue.Available}
	st, admits := breaker.Closed, true
	if m.gate != nil {
		st, admits = m.gate.Admits()
		p.settled = st == breaker.Closed
	}
	switch {
	case !m.healthy.Load():
		p.now = queue.Down
	case st == breaker.Open:
		p.now, p.then = queue.Down, queue.Available
		if paused {
			p.then = queue.Paused
		}
		// Read after OpenRemaining: probeAt is never before the breaker's
		// own expiry, so a pod read as back is one the breaker admits.
		left := m.gate.OpenRemaining()
		p.probeAt = r.now().Add(left).UnixNano()
	case !admits, paused:
		p.now = queue.Paused
	}
	return p
}

// publish decides m's availability again and makes it what Published
// reads. Publications of one member are serialised, so the last one
// stored is the last one decided.
func (m *Member) publish() {
	if m.reg == nil {
		return
	}
	m.pubMu.Lock()
	p := m.reg.decide(m)
	m.pub.Store(&p)
	m.pubMu.Unlock()
}

// republish publishes the pod's current member: the one its error breaker
// now belongs to (a Set may have replaced m), else m.
func (m *Member) republish() {
	if m.eg != nil {
		if cur := m.eg.member.Load(); cur != nil {
			cur.publish()
			return
		}
	}
	m.publish()
}

// settled reports whether m's last publication saw no error breaker or a
// closed one.
func (m *Member) settled() bool {
	p := m.pub.Load()
	return p == nil || p.settled
}

// Published is whether the pod named name may take new work now, as last
// published (Down for an unknown name): the admission queue's availability
// func. It takes no lock and calls nothing: two atomic loads, and the clock
// when the pod's error breaker is open. The snapshot is republished on every
// health change, error-breaker transition and probe, Set and SetObserve;
// a pressure level change is published by Refresh, which the slow path
// calls after each controller round.
func (r *Registry) Published(name string) queue.Availability {
	m, ok := (*r.members.Load())[name]
	if !ok {
		return queue.Down
	}
	p := m.pub.Load()
	if p.probeAt == 0 {
		return p.now
	}
	return p.at(r.now())
}

// Refresh republishes every pod's availability: call it after the pressure
// levels changed (a controller round), then dispatch.
func (r *Registry) Refresh() {
	for _, m := range *r.members.Load() {
		m.publish()
	}
}
