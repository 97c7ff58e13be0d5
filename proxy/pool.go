package proxy

import (
	"net/url"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Upstream describes one vLLM pod.
type Upstream struct {
	// Name identifies the pod in metrics, logs and the admission windows.
	Name string
	// URL is the pod's base URL (scheme and host; a path prefix is kept).
	URL *url.URL
	// Gate is the pod's error breaker. Nil admits everything.
	Gate Gate
	// Models are the models the pod serves; empty: every model (unless
	// DiscoverModels finds some).
	Models []string
	// DiscoverModels reads the pod's GET /v1/models at every health check.
	DiscoverModels bool
}

// member is an upstream plus its health as the active check last saw it.
// Whether it may take new work is decided when asked (availability), from
// its health, its error breaker and its pressure level: nothing is pushed.
type member struct {
	Upstream
	healthy     atomic.Bool
	healthFails atomic.Int32
	healthOKs   atomic.Int32
	models      atomic.Pointer[modelSet] // nil: serves every model
}

// Availability is whether an upstream can take new work now.
type Availability int

// Availabilities, from best to worst.
const (
	// Available: it may take new work.
	Available Availability = iota
	// Paused: not now, but soon by itself: critical memory pressure, or a
	// half-open error breaker whose probes are all out. Waiters keep waiting.
	Paused
	// Down: failing its health checks, or its error breaker is open. A
	// waiter that no other upstream can take is refused at once.
	Down
)

// String returns "available", "paused" or "down".
func (a Availability) String() string {
	switch a {
	case Available:
		return "available"
	case Paused:
		return "paused"
	}
	return "down"
}

// pool is the set of upstreams. Safe for concurrent use; must not be copied.
type pool struct {
	levels  Levels      // nil: no pressure levels
	observe atomic.Bool // mode: observe (critical pressure refuses nothing)

	// mu guards members.
	mu      sync.RWMutex
	members map[string]*member
}

func newPool(levels Levels) *pool {
	return &pool{levels: levels, members: map[string]*member{}}
}

// set replaces the upstream list. Members that keep their name and URL keep
// their health; the rest start healthy. It returns the names that were
// removed, so the caller can retire their windows.
func (p *pool) set(ups []Upstream) (removed []string) {
	next := make(map[string]*member, len(ups))
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, u := range ups {
		m := &member{Upstream: u}
		m.healthy.Store(true)
		m.models.Store(initialModels(u))
		if old, ok := p.members[u.Name]; ok && old.URL.String() == u.URL.String() {
			// A new member with the old one's state: requests in flight read
			// the old member's Gate without a lock, so it is never written.
			m.healthy.Store(old.healthy.Load())
			m.healthFails.Store(old.healthFails.Load())
			m.healthOKs.Store(old.healthOKs.Load())
			if s := old.models.Load(); u.DiscoverModels && s != nil && s.entries != nil {
				m.models.Store(s) // what the pod said of itself stays
			}
		}
		next[u.Name] = m
	}
	for name := range p.members {
		if _, ok := next[name]; !ok {
			removed = append(removed, name)
		}
	}
	p.members = next
	return removed
}

// get returns the member named name.
func (p *pool) get(name string) (*member, bool) {
	p.mu.RLock()
	m, ok := p.members[name]
	p.mu.RUnlock()
	return m, ok
}

// each calls f for every member, in no order, under the read lock, until f
// returns false; it allocates nothing (the request path calls it). f must
// not call back into the pool.
func (p *pool) each(f func(m *member) bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, m := range p.members {
		if !f(m) {
			return
		}
	}
}

// list returns the members sorted by name.
func (p *pool) list() []*member {
	p.mu.RLock()
	out := make([]*member, 0, len(p.members))
	for _, m := range p.members {
		out = append(out, m)
	}
	p.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// failing reports whether m cannot take work for a reason other than
// pressure: failing health checks or an open error breaker.
func (m *member) failing() bool {
	return !m.healthy.Load() || m.Gate != nil && m.Gate.State() == GateOpen
}

// critical reports whether m's pressure is critical (in observe mode too:
// the refusals it would cause are counted there).
func (p *pool) critical(m *member) bool {
	return p.levels != nil && p.levels.Critical(m.Name)
}

// availability decides whether m may take new work now. In observe mode
// critical pressure pauses nothing.
func (p *pool) availability(m *member) Availability {
	switch {
	case m.failing():
		return Down
	case m.Gate != nil && m.Gate.State() == GateProbing, p.critical(m) && !p.observe.Load():
		return Paused
	}
	return Available
}

// anyAvailable reports whether some upstream not in skip can take new work
// now or soon (none is Down).
func (p *pool) anyAvailable(skip ...string) bool {
	found := false
	p.each(func(m *member) bool {
		found = !m.failing() && !slices.Contains(skip, m.Name)
		return !found
	})
	return found
}

// whyDown says why no upstream can take work, for the client's message:
// failing health checks, open error breakers (recent failures), or both.
func (p *pool) whyDown(skip ...string) string {
	unhealthy, open := 0, 0
	for _, m := range p.list() {
		switch {
		case slices.Contains(skip, m.Name):
		case !m.healthy.Load():
			unhealthy++
		case m.Gate != nil && m.Gate.State() == GateOpen:
			open++
		}
	}
	switch {
	case unhealthy > 0 && open > 0:
		return "no upstream can take the request: some fail their health check, the others failed recently (error breaker open)"
	case open > 0:
		return "no upstream can take the request: every upstream failed recently (error breaker open)"
	case unhealthy > 0:
		return "no upstream can take the request: every upstream fails its health check"
	}
	return "no upstream can take the request"
}

// retryAfter is when a client refused because no upstream it may use can
// take work should come back: the soonest an open error breaker among them
// lets a probe through, or def when one of them fails its health check
// (nobody knows when that ends) or none is open.
func (p *pool) retryAfter(def time.Duration, skip ...string) time.Duration {
	soonest := time.Duration(0)
	for _, m := range p.list() {
		if slices.Contains(skip, m.Name) {
			continue
		}
		if !m.healthy.Load() || m.Gate == nil {
			return def
		}
		if left := m.Gate.OpenRemaining(); left > 0 && (soonest == 0 || left < soonest) {
			soonest = left
		}
	}
	if soonest == 0 {
		return def
	}
	return soonest
}

// allDegraded reports whether every upstream that could otherwise serve is
// degraded or worse: sheddable classes go first then.
func (p *pool) allDegraded(skip ...string) bool {
	degraded, all := false, true
	p.each(func(m *member) bool {
		if m.failing() || slices.Contains(skip, m.Name) {
			return true
		}
		if p.levels == nil || !p.levels.Degraded(m.Name) {
			all = false
			return false
		}
		degraded = true
		return true
	})
	return all && degraded
}

// allCritical reports whether every upstream that could otherwise serve is
// under critical memory pressure (DESIGN §4: refuse new work at once).
func (p *pool) allCritical(skip ...string) bool {
	critical, all := false, true
	p.each(func(m *member) bool {
		if m.failing() || slices.Contains(skip, m.Name) {
			return true
		}
		if !p.critical(m) {
			all = false
			return false
		}
		critical = true
		return true
	})
	return all && critical
}

// Availability reports whether the upstream named name may take new work
// now, decided from its current state; Down for an unknown name. The
// admission queue calls it at every dispatch: it reads atomics and the
// error breaker's state, and never calls back into the queue.
func (h *Handler) Availability(name string) Availability {
	m, ok := h.pool.get(name)
	if !ok {
		return Down
	}
	return h.pool.availability(m)
}

// UpstreamStatus is one pod as /admin/state shows it.
type UpstreamStatus struct {
	Name        string `json:"name"`
	URL         string `json:"url"`
	Healthy     bool   `json:"healthy"`
	BreakerOpen bool   `json:"breaker_open"`
	Critical    bool   `json:"critical"`
	Available   bool   `json:"available"`
}

// Upstreams returns the pods' status, sorted by name.
func (h *Handler) Upstreams() []UpstreamStatus {
	ms := h.pool.list()
	out := make([]UpstreamStatus, len(ms))
	for i, m := range ms {
		out[i] = UpstreamStatus{Name: m.Name, URL: m.URL.Redacted(), Healthy: m.healthy.Load(),
			BreakerOpen: m.Gate != nil && m.Gate.State() == GateOpen,
			Critical:    h.pool.levels != nil && h.pool.levels.Critical(m.Name),
			Available:   h.pool.availability(m) == Available}
	}
	return out
}

// Draining reports whether shutdown has begun.
func (h *Handler) Draining() bool { return h.draining.Load() }
