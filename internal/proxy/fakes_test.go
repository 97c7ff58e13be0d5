package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/proxy/framing"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeAdmission hands out slots on named upstreams from a semaphore per
// upstream, queueing up to maxQueue waiters. Like the real queue it asks
// availability at dispatch (avail, the Handler's queue.Availability).
type fakeAdmission struct {
	mu       sync.Mutex
	sem      map[string]chan struct{}
	avail    func(string) queue.Availability // nil: all available
	waiting  int
	maxQueue int
	order    []string
}

func newFakeAdmission(window int, names ...string) *fakeAdmission {
	a := &fakeAdmission{sem: map[string]chan struct{}{}, maxQueue: 1 << 20, order: names}
	for _, n := range names {
		a.sem[n] = make(chan struct{}, window)
	}
	return a
}

type fakeSlot struct {
	name string
	once sync.Once
	sem  chan struct{}
}

func (s *fakeSlot) Upstream() string { return s.name }
func (s *fakeSlot) Release()         { s.once.Do(func() { <-s.sem }) }

// Settle: the fake queue has no fair share to correct (the real queue's
// settle is tested in package queue and through decide).
func (s *fakeSlot) Settle(int64) {}

func (a *fakeAdmission) Acquire(ctx context.Context, _ decide.Need, _ int, exclude []string) (decide.Slot, error) {
	a.mu.Lock()
	if a.waiting >= a.maxQueue {
		a.mu.Unlock()
		return nil, decide.ErrQueueFull
	}
	a.waiting++
	a.mu.Unlock()
	defer func() { a.mu.Lock(); a.waiting--; a.mu.Unlock() }()
	for _, n := range a.order {
		if skip(exclude, n) || !a.isAvailable(n) {
			continue
		}
		select {
		case a.sem[n] <- struct{}{}:
			return &fakeSlot{name: n, sem: a.sem[n]}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return nil, decide.ErrNoUpstream
}

func (a *fakeAdmission) TryAcquire(_ decide.Need, exclude []string) decide.Slot {
	for _, n := range a.order {
		if skip(exclude, n) || !a.isAvailable(n) {
			continue
		}
		select {
		case a.sem[n] <- struct{}{}:
			return &fakeSlot{name: n, sem: a.sem[n]}
		default:
		}
	}
	return nil
}

func skip(list []string, n string) bool {
	for _, x := range list {
		if x == n {
			return true
		}
	}
	return false
}

func (a *fakeAdmission) isAvailable(n string) bool {
	a.mu.Lock()
	f := a.avail
	a.mu.Unlock()
	return f == nil || f(n) == queue.Available
}

func (a *fakeAdmission) Dispatch() {}

// fakeLevels is a Levels whose critical set the test changes.
type fakeLevels struct {
	mu       sync.Mutex
	critical map[string]bool
}

func (l *fakeLevels) Critical(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.critical[name]
}

func (l *fakeLevels) Degraded(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.critical[name]
}

func (l *fakeLevels) set(name string, critical bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.critical == nil {
		l.critical = map[string]bool{}
	}
	l.critical[name] = critical
}

// limitErr is a fast-breaker refusal.
type limitErr struct{ wait time.Duration }

func (e limitErr) Error() string             { return "rate limited" }
func (e limitErr) RetryAfter() time.Duration { return e.wait }

type limiterFunc func(string) error

func (f limiterFunc) Allow(_ context.Context, k string) error { return f(k) }

// gateFunc adapts a function to Gate and records results.
type recordingGate struct {
	mu      sync.Mutex
	results []pods.Result
	refuse  bool
	left    time.Duration // OpenRemaining while refusing
}

func (g *recordingGate) OpenRemaining() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refuse {
		return g.left
	}
	return 0
}

func (g *recordingGate) Admits() (breaker.State, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refuse {
		return breaker.Open, false
	}
	return breaker.Closed, true
}

func (g *recordingGate) Allow() (func(pods.Result), error) {
	if g.refuse {
		return nil, errors.New("open")
	}
	return func(r pods.Result) { g.mu.Lock(); g.results = append(g.results, r); g.mu.Unlock() }, nil
}

func (g *recordingGate) got() []pods.Result {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]pods.Result(nil), g.results...)
}

// testProxy is a Handler in front of one httptest pod, served by an
// httptest server of its own.
type testProxy struct {
	h       *Handler
	srv     *httptest.Server
	reg     *prometheus.Registry
	adm     *fakeAdmission
	levels  *fakeLevels
	gate    *recordingGate
	podHits *counter
}

type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) inc() { c.mu.Lock(); c.n++; c.mu.Unlock() }
func (c *counter) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func newTestProxy(t *testing.T, pod http.Handler, mutate func(*testOptions)) *testProxy {
	t.Helper()
	hits := &counter{}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.inc()
		pod.ServeHTTP(w, r)
	}))
	t.Cleanup(upstream.Close)
	u, _ := url.Parse(upstream.URL)
	tp := &testProxy{reg: prometheus.NewRegistry(), adm: newFakeAdmission(64, "pod-0"), levels: &fakeLevels{},
		gate: &recordingGate{}, podHits: hits}
	opts := testOptions{
		Upstreams: []pods.Pod{{Name: "pod-0", URL: u, Gate: tp.gate}},
		Admission: tp.adm,
		Levels:    tp.levels,
		Metrics:   NewMetrics(tp.reg),
	}
	if mutate != nil {
		mutate(&opts)
	}
	h, err := newHandler(opts)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	tp.h = h
	if a, ok := opts.Admission.(*fakeAdmission); ok {
		a.mu.Lock()
		a.avail = h.reg.Availability
		a.mu.Unlock()
	}
	tp.srv = httptest.NewUnstartedServer(h)
	serveAsGatekeeper(tp.srv)
	h.ReturnConnsTo(tp.srv.Config) // as cmd/gatekeeper does
	if opts.Server != nil {
		opts.Server(tp.srv.Config)
	}
	tp.srv.Start()
	t.Cleanup(tp.srv.Close)
	// First (cleanups run last in, first out), as cmd/gatekeeper's shutdown
	// does: streams still handed off are cut, and those that ended have
	// given their connections back, before the server closes. A connection
	// given back after Close began would race httptest's count of them.
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = h.WaitStreams(ctx)
	})
	return tp
}

// close closes the proxy's server and waits for every request to record
// its outcome: those on net/http's goroutines (httptest.Server.Close) and
// the streams handed off (WaitStreams), as cmd/gatekeeper's shutdown does.
func (tp *testProxy) close() {
	tp.srv.Close()
	_ = tp.h.WaitStreams(context.Background())
}

// serveAsGatekeeper sets up srv's listener and connection contexts as
// cmd/gatekeeper does for plain HTTP.
func serveAsGatekeeper(srv *httptest.Server) {
	srv.Listener = framing.Guard(SendListener(srv.Listener))
	srv.Config.ConnContext = ConnContext
}

func (tp *testProxy) outcomes(t *testing.T) map[decide.Outcome]float64 {
	t.Helper()
	out := map[decide.Outcome]float64{}
	for _, o := range decide.Outcomes {
		out[o] = testutil.ToFloat64(tp.h.metrics.requests.WithLabelValues(string(o)))
	}
	return out
}

// testOptions are a Handler's options with the decision core's ingredients
// beside them: newHandler builds the core (over a registry of Upstreams)
// the way cmd/gatekeeper does, so every proxy test runs the real core.
type testOptions struct {
	Policy       decide.Policy
	Upstreams    []pods.Pod
	Limiter      decide.Limiter
	Admission    decide.Admission
	Levels       pods.Levels
	ClassLimiter decide.ClassLimiter
	ModelLimiter decide.ModelLimiter
	Quotas       decide.Quotas
	OnPodRefused func(upstream string)
	Transport    TransportSettings
	RoundTripper http.RoundTripper
	Metrics      *Metrics
	Logger       *slog.Logger
	Now          func() time.Time
	Version      string
	Ready        func() error
	Extra        func(*Options)     // the handler's other options (tracing)
	Server       func(*http.Server) // the proxy's server's settings, before it starts
}

func newHandler(o testOptions) (*Handler, error) {
	reg := pods.New(o.Levels)
	reg.Set(o.Upstreams)
	var rec decide.Recorder
	if o.Metrics != nil {
		rec = o.Metrics
		names := make([]string, len(o.Upstreams))
		for i, u := range o.Upstreams {
			names[i] = u.Name
		}
		o.Metrics.UpstreamsSet(names, nil)
	}
	core, err := decide.New(decide.Options{Registry: reg, Admission: o.Admission, Limiter: o.Limiter,
		ClassLimiter: o.ClassLimiter, ModelLimiter: o.ModelLimiter, Quotas: o.Quotas, Recorder: rec, Policy: o.Policy, Now: o.Now,
		OnPodRefused: o.OnPodRefused, Ready: o.Ready})
	if err != nil {
		return nil, err
	}
	opts := Options{Core: core, Transport: o.Transport,
		RoundTripper: o.RoundTripper, Metrics: o.Metrics, Logger: o.Logger, Now: o.Now, Version: o.Version,
		StreamHandoff: true} // as cmd/gatekeeper's default policy has it
	if o.Extra != nil {
		o.Extra(&opts)
	}
	return New(opts)
}
