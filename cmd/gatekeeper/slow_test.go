package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// fakePod is a vLLM pod as an http.RoundTripper: it records what arrives
// and holds every request until the test releases it, so the whole path runs
// inside a synctest bubble with no network.
type fakePod struct {
	release chan struct{}

	// mu guards the fields below.
	mu       sync.Mutex
	inflight int
	max      int
	arrivals []string
}

func newFakePod() *fakePod { return &fakePod{release: make(chan struct{})} }

func (p *fakePod) RoundTrip(r *http.Request) (*http.Response, error) {
	var body struct{ Prompt string }
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &body)
	p.mu.Lock()
	p.inflight++
	p.max = max(p.max, p.inflight)
	p.arrivals = append(p.arrivals, body.Prompt)
	p.mu.Unlock()
	defer func() { p.mu.Lock(); p.inflight--; p.mu.Unlock() }()
	select {
	case <-p.release:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
}

func (p *fakePod) stats() (inflight, maxSeen int, arrivals []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inflight, p.max, append([]string(nil), p.arrivals...)
}

// slowPolicy's fragmentation rule has no for (the default's is 2s), so one
// fed round moves a level.
const slowPolicy = `
upstreams:
  - {name: pod, url: "http://pod.invalid:8000", max_inflight: 10, min_inflight: 2}
fast_breaker: {qps: 0}
health_check: {interval: 1h, timeout: 1s}
pressure: {hold: 5s, hysteresis: 0.05, rules: {fragmentation: {degrade: 1.2, shed: 1.5}}}
batch: {cut: 0.2, cut_every: 2s, ramp_step: 0.5, ramp_every: 1s}
queue: {max_wait: 5m, starvation_after: 1m, ttft_deadline: 0s}  # a backlog that waits out the pressure
`

// slowRig is an app whose pod is a fakePod and whose pressure readings the
// test feeds by hand, as the monitor would after each poll.
type slowRig struct {
	t   *testing.T
	a   *app
	pod *fakePod
	wg  sync.WaitGroup
}

func newSlowRig(t *testing.T) *slowRig { return newRigWith(t, slowPolicy) }

// newRigWith is a slowRig running policy.
func newRigWith(t *testing.T, policy string) *slowRig {
	cfg, err := config.Parse([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	pod := newFakePod()
	a, err := newApp(cfg, appOptions{transport: pod})
	if err != nil {
		t.Fatal(err)
	}
	return &slowRig{t: t, a: a, pod: pod}
}

// fragmentation feeds one poll round in which the pod's ratio is v.
func (r *slowRig) fragmentation(v float64) {
	r.a.slow.Observe(pressure.State{Upstreams: []pressure.UpstreamState{{Name: "pod",
		Signals: map[pressure.Signal]pressure.Value{pressure.Fragmentation: {Value: v}}}}})
}

// send starts a completion whose prompt is tag and returns its status channel.
func (r *slowRig) send(ctx context.Context, tag string) <-chan *httptest.ResponseRecorder {
	out := make(chan *httptest.ResponseRecorder, 1)
	r.wg.Go(func() {
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/completions",
			strings.NewReader(`{"model":"m","prompt":"`+tag+`","max_tokens":16}`))
		rec := httptest.NewRecorder()
		r.a.handler.ServeHTTP(rec, req)
		out <- rec
	})
	return out
}

func (r *slowRig) get(path string) int {
	rec := httptest.NewRecorder()
	r.a.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code
}

func (r *slowRig) windowLimit() int { return r.a.queue.Stats().Windows[0].Limit }

func TestSlowBreakerCutsTheBatchAtDegraded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSlowRig(t)
		r.fragmentation(1.3)
		if got := r.windowLimit(); got != 8 {
			t.Fatalf("window at ratio 1.3 = %d, want 8 (max 10 cut by 20%%)", got)
		}
		for range 20 {
			r.send(t.Context(), "x")
		}
		synctest.Wait()
		inflight, _, _ := r.pod.stats()
		if inflight != 8 || r.a.queue.Stats().Length != 12 {
			t.Fatalf("pod runs %d, queue holds %d; want 8 and 12", inflight, r.a.queue.Stats().Length)
		}
		for range 20 {
			r.pod.release <- struct{}{}
		}
		r.wg.Wait()
		if _, maxSeen, arrivals := r.pod.stats(); maxSeen > 8 || len(arrivals) != 20 {
			t.Errorf("pod saw at most %d at once over %d requests, want ≤ 8 over 20", maxSeen, len(arrivals))
		}
	})
}

func TestSlowBreakerShedsAndRecoversShortFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSlowRig(t)
		r.fragmentation(1.0)
		// Fill the window (10), then queue four long prompts and, behind
		// them, four short ones: FIFO order while normal.
		for range 10 {
			r.send(t.Context(), "fill")
		}
		synctest.Wait()
		long := strings.Repeat("long document ", 400)
		for range 4 {
			r.send(t.Context(), long)
		}
		synctest.Wait()
		for range 4 {
			r.send(t.Context(), "short")
		}
		synctest.Wait()
		if n := r.a.queue.Stats().Length; n != 8 {
			t.Fatalf("queue holds %d, want 8", n)
		}

		// Critical: new requests get 503 at once, /readyz turns 503, the
		// window is cut, and nothing in flight or queued is dropped.
		r.fragmentation(1.6)
		if code := r.get("/readyz"); code != http.StatusServiceUnavailable {
			t.Errorf("/readyz while critical = %d, want 503", code)
		}
		rec := <-r.send(t.Context(), "new")
		if rec.Code != 503 || rec.Header().Get("X-Gatekeeper-Reason") != "overloaded" || rec.Header().Get("Retry-After") == "" {
			t.Errorf("new request while critical = %d %q, want 503 overloaded with Retry-After",
				rec.Code, rec.Header().Get("X-Gatekeeper-Reason"))
		}
		if st := r.a.snapshot(); st.Upstreams[0].LastChange == nil || st.Upstreams[0].LastChange.Signal != "fragmentation" ||
			st.Upstreams[0].LastChange.To != "critical" {
			t.Errorf("/admin/state last_change = %+v, want the move to critical caused by fragmentation", st.Upstreams[0].LastChange)
		}
		limit := r.windowLimit()
		if limit >= 8 {
			t.Errorf("window while critical = %d, want it cut below 8", limit)
		}
		for range 10 { // the first batch finishes; nothing new may start
			r.pod.release <- struct{}{}
		}
		synctest.Wait()
		if inflight, _, arrivals := r.pod.stats(); inflight != 0 || len(arrivals) != 10 {
			t.Fatalf("while critical the pod runs %d and has seen %d, want 0 and 10", inflight, len(arrivals))
		}

		// Recovery: below 1.5 × 0.95 for the 5 s hold, then ramp up and
		// drain the backlog shortest first.
		r.fragmentation(1.0)
		time.Sleep(6 * time.Second)
		r.fragmentation(1.0)
		synctest.Wait()
		// The recovering window is smaller than the backlog, so the order
		// shows in what got in: every short prompt, and only then longs.
		// (Goroutines reach the pod in any order, so count, don't index.)
		_, _, arrivals := r.pod.stats()
		resumed := arrivals[10:]
		if len(resumed) < 4 || len(resumed) >= 8 {
			t.Fatalf("after recovery %d more reached the pod, want between 4 and 7 (window below the backlog of 8)", len(resumed))
		}
		shorts := 0
		for _, a := range resumed {
			if a == "short" {
				shorts++
			}
		}
		if shorts != 4 {
			t.Errorf("of the %d dispatched on recovery %d were short, want all 4 shorts first", len(resumed), shorts)
		}
		if code := r.get("/readyz"); code != http.StatusOK {
			t.Errorf("/readyz after recovery = %d, want 200", code)
		}
		for range 8 {
			r.pod.release <- struct{}{}
		}
		r.wg.Wait()
	})
}

func TestObserveModeRefusesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := config.Parse([]byte(slowPolicy + "mode: observe\n"))
		if err != nil {
			t.Fatal(err)
		}
		pod := newFakePod()
		a, err := newApp(cfg, appOptions{transport: pod})
		if err != nil {
			t.Fatal(err)
		}
		r := &slowRig{t: t, a: a, pod: pod}
		r.fragmentation(1.6)
		if got := r.windowLimit(); got != 10 {
			t.Errorf("window in observe mode = %d, want 10 (unchanged)", got)
		}
		done := r.send(t.Context(), "x")
		synctest.Wait()
		pod.release <- struct{}{}
		if rec := <-done; rec.Code != 200 {
			t.Errorf("request while critical in observe mode = %d, want 200", rec.Code)
		}
		m := a.handler.Metrics()
		if m == nil {
			t.Fatal("no metrics")
		}
		body := scrape(t, a)
		for _, want := range []string{
			`gatekeeper_decisions_total{decision="overloaded",enforced="false"} 1`,
			`gatekeeper_decisions_total{decision="window_resize",enforced="false"}`,
			`gatekeeper_pressure_level{upstream="pod"} 2`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
		// The series exists at 0 from the start: a resize must have counted.
		if zero := `gatekeeper_decisions_total{decision="window_resize",enforced="false"} 0` + "\n"; strings.Contains(body, zero) {
			t.Errorf("/metrics has %q: no window resize counted", zero)
		}
	})
}

// scrape renders the app's registry as /metrics would.
func scrape(t *testing.T, a *app) string {
	t.Helper()
	rec := httptest.NewRecorder()
	a.adminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}
