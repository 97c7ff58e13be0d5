package pods

import (
	"net"
	"net/url"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// Pod describes one model server.
type Pod struct {
	// Name identifies the pod in metrics, logs and the admission windows.
	Name string
	// URL is the pod's base URL (scheme and host; a path prefix is kept).
	URL *url.URL
	// Errors configures the pod's error breaker, which the registry builds
	// and keeps across a Set that changes neither the pod's name nor these
	// settings (their OnChange is the registry's: see Options). Nil: none.
	Errors *breaker.ErrorSettings
	// Gate, if set, is the pod's error breaker instead of one built from
	// Errors (tests pass fakes). On a Member, Gate is the breaker as the
	// registry hands it out: its probes republish the pod's availability.
	Gate Gate
	// Models are the models the pod serves; empty: every model (unless
	// DiscoverModels finds some).
	Models []string
	// DiscoverModels reads the pod's GET /v1/models at every health check.
	DiscoverModels bool
}

// Endpoint is the pod's "host:port", the port defaulted from the scheme:
// what the endpoint picker names to Envoy.
func (p Pod) Endpoint() string {
	if p.URL == nil {
		return ""
	}
	if p.URL.Port() != "" {
		return p.URL.Host
	}
	port := "80"
	if p.URL.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(p.URL.Hostname(), port)
}

// Member is a pod plus what the registry knows of it now.
type Member struct {
	Pod
	healthy     atomic.Bool
	healthFails atomic.Int32
	healthOKs   atomic.Int32
	models      atomic.Pointer[modelSet] // nil: serves every model

	reg  *Registry  // nil on a Member built outside a registry
	gate Gate       // the error breaker itself; nil: none
	eg   *errorGate // when the registry built gate
	// pubMu serialises publish; pub is what Published reads (never nil in
	// a registry).
	pubMu sync.Mutex
	pub   atomic.Pointer[published]
}

// Healthy reports what the active health check last concluded.
func (m *Member) Healthy() bool { return m.healthy.Load() }

// ReportHealth records one health check's result and reports whether it
// flipped the pod's health: after unhealthyAfter failures in a row, or
// healthyAfter successes. A flip republishes the pod's availability.
func (m *Member) ReportHealth(ok bool, healthyAfter, unhealthyAfter int) (flipped bool) {
	if ok {
		m.healthFails.Store(0)
		flipped = m.healthOKs.Add(1) >= int32(healthyAfter) && !m.healthy.Swap(true)
	} else {
		m.healthOKs.Store(0)
		flipped = m.healthFails.Add(1) >= int32(unhealthyAfter) && m.healthy.Swap(false)
	}
	if flipped {
		m.publish()
	}
	return flipped
}

// failing reports whether m cannot take work for a reason other than
// pressure: failing health checks or an open error breaker.
func (m *Member) failing() bool {
	return !m.healthy.Load() || m.breakerOpen()
}

// breakerOpen reports whether m's error breaker is open.
func (m *Member) breakerOpen() bool {
	if m.gate == nil {
		return false
	}
	st, _ := m.gate.Admits()
	return st == breaker.Open
}

// Options configures a Registry. The zero value: no pressure levels, no
// hooks.
type Options struct {
	// Levels reports each pod's pressure level; nil: none.
	Levels Levels
	// BreakerChanged, if set, hears every transition of an error breaker
	// the registry built (Pod.Errors), after the pod's availability was
	// republished, outside every lock, on the goroutine of the request or
	// check that caused it (breaker.ErrorSettings.OnChange). It may call
	// the registry and the queue.
	BreakerChanged func(pod string, from, to breaker.State)
	// BreakerInvalid, if set, hears that a pod's Errors were refused by
	// breaker.NewErrorBreaker: the pod runs without an error breaker.
	BreakerInvalid func(pod string, err error)
}

// Registry is the set of pods. Safe for concurrent use; must not be copied.
type Registry struct {
	opts    Options
	levels  Levels      // nil: no pressure levels
	observe atomic.Bool // mode: observe (critical pressure refuses nothing)
	// members is replaced whole by Set: readers take no lock.
	members atomic.Pointer[map[string]*Member]

	// mu serialises Set and guards gates.
	mu    sync.Mutex
	gates map[string]*errorGate // by pod name
}

// New returns an empty registry whose pods' pressure levels come from
// levels (nil: none).
func New(levels Levels) *Registry { return NewWith(Options{Levels: levels}) }

// NewWith returns an empty registry configured by o.
func NewWith(o Options) *Registry {
	r := &Registry{opts: o, levels: o.Levels, gates: map[string]*errorGate{}}
	r.members.Store(&map[string]*Member{})
	return r
}

// now is the error breakers' clock: gobreaker reads time.Now itself, and
// when an open breaker lets a probe through must be read on the same clock
// (tests run inside testing/synctest).
func (r *Registry) now() time.Time { return time.Now() }

// SetObserve turns observe mode on or off (critical pressure pauses nothing
// while on) and reports whether it changed; a change republishes every
// pod's availability.
func (r *Registry) SetObserve(on bool) (changed bool) {
	changed = r.observe.Swap(on) != on
	if changed {
		r.Refresh()
	}
	return changed
}

// Observe reports whether observe mode is on.
func (r *Registry) Observe() bool { return r.observe.Load() }

// Set replaces the pod list. Pods that keep their name and URL keep their
// health; the rest start healthy. A pod keeps its error breaker while its
// name and Errors stay the same, whatever its URL; otherwise it gets a new
// one. Every pod's availability is published before the list is replaced.
// It returns the names that were removed, so the caller can retire their
// windows.
func (r *Registry) Set(ps []Pod) (removed []string) {
	next := make(map[string]*Member, len(ps))
	gates := make(map[string]*errorGate, len(ps))
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := *r.members.Load()
	for _, p := range ps {
		m := &Member{Pod: p, reg: r, gate: p.Gate}
		m.healthy.Store(true)
		m.models.Store(initialModels(p))
		if m.gate == nil && p.Errors != nil {
			if m.eg = r.errorGate(p.Name, *p.Errors); m.eg != nil {
				gates[p.Name] = m.eg
				m.gate = m.eg.b
			}
		}
		m.Gate = nil
		if m.gate != nil {
			m.Gate = publishing{g: m.gate, m: m}
		}
		if old, ok := cur[p.Name]; ok && old.URL.String() == p.URL.String() {
			// A new member with the old one's state: requests in flight read
			// the old member's Gate without a lock, so it is never written.
			m.healthy.Store(old.healthy.Load())
			m.healthFails.Store(old.healthFails.Load())
			m.healthOKs.Store(old.healthOKs.Load())
			if s := old.models.Load(); p.DiscoverModels && s != nil && s.entries != nil {
				m.models.Store(s) // what the pod said of itself stays
			}
		}
		if m.eg != nil {
			m.eg.member.Store(m) // before publishing: a transition from now on republishes m
		}
		m.publish()
		next[p.Name] = m
	}
	for name := range cur {
		if _, ok := next[name]; !ok {
			removed = append(removed, name)
		}
	}
	r.gates = gates
	r.members.Store(&next)
	return removed
}

// Get returns the member named name.
func (r *Registry) Get(name string) (*Member, bool) {
	m, ok := (*r.members.Load())[name]
	return m, ok
}

// Len is the number of pods.
func (r *Registry) Len() int {
	return len(*r.members.Load())
}

// each calls f for every member, in no order, until f returns false; it
// allocates nothing (the request path calls it).
func (r *Registry) each(f func(m *Member) bool) {
	for _, m := range *r.members.Load() {
		if !f(m) {
			return
		}
	}
}

// List returns the members sorted by name.
func (r *Registry) List() []*Member {
	ms := *r.members.Load()
	out := make([]*Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// critical reports whether m's pressure is critical (in observe mode too:
// the refusals it would cause are counted there).
func (r *Registry) critical(m *Member) bool {
	return r.levels != nil && r.levels.Critical(m.Name)
}

// availability decides whether m may take new work now. In observe mode
// critical pressure pauses nothing. Asking the error breaker moves it from
// open to half-open once its open time has passed, so no look ahead is
// needed here.
func (r *Registry) availability(m *Member) queue.Availability {
	return r.decide(m).now
}

// Availability reports whether the pod named name may take new work now,
// decided from its current state as it is asked (the error breaker's state
// and the pressure level included); Down for an unknown name. It reads the
// breaker's and the levels' locks: the admission queue reads Published
// instead, which takes none.
func (r *Registry) Availability(name string) queue.Availability {
	m, ok := r.Get(name)
	if !ok {
		return queue.Down
	}
	return r.availability(m)
}

// AnyAvailable reports whether some pod not in skip can take new work now
// or soon (none is Down).
func (r *Registry) AnyAvailable(skip ...string) bool {
	found := false
	r.each(func(m *Member) bool {
		found = !m.failing() && !slices.Contains(skip, m.Name)
		return !found
	})
	return found
}

// WhyDown says why no pod can take work, for the client's message: failing
// health checks, open error breakers (recent failures), or both.
func (r *Registry) WhyDown(skip ...string) string {
	unhealthy, open := 0, 0
	for _, m := range r.List() {
		switch {
		case slices.Contains(skip, m.Name):
		case !m.healthy.Load():
			unhealthy++
		case m.breakerOpen():
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

// RetryAfter is when a client refused because no pod it may use can take
// work should come back: the soonest an open error breaker among them lets
// a probe through, or def when one of them fails its health check (nobody
// knows when that ends) or none is open.
func (r *Registry) RetryAfter(def time.Duration, skip ...string) time.Duration {
	soonest := time.Duration(0)
	for _, m := range r.List() {
		if slices.Contains(skip, m.Name) {
			continue
		}
		if !m.healthy.Load() || m.gate == nil {
			return def
		}
		if left := m.gate.OpenRemaining(); left > 0 && (soonest == 0 || left < soonest) {
			soonest = left
		}
	}
	if soonest == 0 {
		return def
	}
	return soonest
}

// AllDegraded reports whether every pod that could otherwise serve is
// degraded or worse: sheddable classes go first then.
func (r *Registry) AllDegraded(skip ...string) bool {
	degraded, all := false, true
	r.each(func(m *Member) bool {
		if m.failing() || slices.Contains(skip, m.Name) {
			return true
		}
		if r.levels == nil || !r.levels.Degraded(m.Name) {
			all = false
			return false
		}
		degraded = true
		return true
	})
	return all && degraded
}

// AllCritical reports whether every pod that could otherwise serve is under
// critical memory pressure: new work is refused at once.
func (r *Registry) AllCritical(skip ...string) bool {
	critical, all := false, true
	r.each(func(m *Member) bool {
		if m.failing() || slices.Contains(skip, m.Name) {
			return true
		}
		if !r.critical(m) {
			all = false
			return false
		}
		critical = true
		return true
	})
	return all && critical
}

// Status is one pod as /admin/state shows it.
type Status struct {
	Name        string `json:"name"`
	URL         string `json:"url"`
	Healthy     bool   `json:"healthy"`
	BreakerOpen bool   `json:"breaker_open"`
	Critical    bool   `json:"critical"`
	Available   bool   `json:"available"`
}

// Statuses returns every pod's status, sorted by name.
func (r *Registry) Statuses() []Status {
	ms := r.List()
	out := make([]Status, len(ms))
	for i, m := range ms {
		out[i] = Status{Name: m.Name, URL: m.URL.Redacted(), Healthy: m.healthy.Load(),
			BreakerOpen: m.breakerOpen(),
			Critical:    r.critical(m),
			Available:   r.availability(m) == queue.Available}
	}
	return out
}
