package proxy

import (
	"net/url"
	"sort"
	"sync"
	"sync/atomic"
)

// Upstream describes one vLLM pod.
type Upstream struct {
	// Name identifies the pod in metrics, logs and the admission windows.
	Name string
	// URL is the pod's base URL (scheme and host; a path prefix is kept).
	URL *url.URL
	// Gate is the pod's error breaker. Nil admits everything.
	Gate Gate
}

// member is an upstream plus what decides whether it may take new work.
// The flags are atomics: they are read per request and written by the
// health loop, the error breaker and the slow breaker.
type member struct {
	Upstream
	healthy     atomic.Bool
	breakerOpen atomic.Bool
	critical    atomic.Bool
	healthFails atomic.Int32
	healthOKs   atomic.Int32
}

// available reports whether the member may receive new dispatches. In
// observe mode critical pressure is counted but does not stop dispatch.
func (m *member) available(observe bool) bool {
	return m.healthy.Load() && !m.breakerOpen.Load() && (observe || !m.critical.Load())
}

// pool is the set of upstreams. Safe for concurrent use; must not be copied.
type pool struct {
	adm     Admission
	observe atomic.Bool // mode: observe

	// mu guards members.
	mu      sync.RWMutex
	members map[string]*member
}

func newPool(adm Admission) *pool {
	return &pool{adm: adm, members: map[string]*member{}}
}

// set replaces the upstream list. Members that keep their name and URL keep
// their health and breaker state; the rest start healthy. It returns the names
// that were removed, so the caller can retire their windows.
func (p *pool) set(ups []Upstream) (removed []string) {
	next := make(map[string]*member, len(ups))
	p.mu.Lock()
	for _, u := range ups {
		m := &member{Upstream: u}
		m.healthy.Store(true)
		if old, ok := p.members[u.Name]; ok && old.URL.String() == u.URL.String() {
			// A new member with the old one's state: requests in flight read
			// the old member's Gate without a lock, so it is never written.
			m.healthy.Store(old.healthy.Load())
			m.breakerOpen.Store(old.breakerOpen.Load())
			m.critical.Store(old.critical.Load())
			m.healthFails.Store(old.healthFails.Load())
			m.healthOKs.Store(old.healthOKs.Load())
		}
		next[u.Name] = m
	}
	for name := range p.members {
		if _, ok := next[name]; !ok {
			removed = append(removed, name)
		}
	}
	p.members = next
	p.mu.Unlock()
	for _, u := range ups {
		p.refresh(u.Name)
	}
	return removed
}

// get returns the member named name.
func (p *pool) get(name string) (*member, bool) {
	p.mu.RLock()
	m, ok := p.members[name]
	p.mu.RUnlock()
	return m, ok
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

// refresh pushes a member's availability to the admission windows.
func (p *pool) refresh(name string) {
	if m, ok := p.get(name); ok && p.adm != nil {
		p.adm.SetAvailable(name, m.available(p.observe.Load()))
	}
}

// refreshAll pushes every member's availability (after a mode change).
func (p *pool) refreshAll() {
	for _, m := range p.list() {
		p.refresh(m.Name)
	}
}

// anyAvailable reports whether some upstream can take new work.
func (p *pool) anyAvailable() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, m := range p.members {
		if m.available(p.observe.Load()) {
			return true
		}
	}
	return false
}

// allCritical reports whether every upstream that could otherwise serve is
// under critical memory pressure (DESIGN §4: refuse new work at once).
func (p *pool) allCritical() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	critical := false
	for _, m := range p.members {
		if !m.healthy.Load() || m.breakerOpen.Load() {
			continue
		}
		if !m.critical.Load() {
			return false
		}
		critical = true
	}
	return critical
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
			BreakerOpen: m.breakerOpen.Load(), Critical: m.critical.Load(), Available: m.available(h.pool.observe.Load())}
	}
	return out
}

// Draining reports whether shutdown has begun.
func (h *Handler) Draining() bool { return h.draining.Load() }
