package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// restartingPod is a pod as an http.RoundTripper that is down (connection
// refused) or answering, and counts what reaches it.
type restartingPod struct {
	up       atomic.Bool
	arrivals atomic.Int64
}

func (p *restartingPod) RoundTrip(r *http.Request) (*http.Response, error) {
	p.arrivals.Add(1)
	_, _ = io.Copy(io.Discard, r.Body)
	if !p.up.Load() {
		return nil, errors.New("dial tcp 10.0.0.7:8000: connect: connection refused")
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
}

const restartPolicy = `
upstreams:
  - {name: pod, url: "http://pod.invalid:8000"}
fast_breaker: {qps: 0}
health_check: {interval: 1h, timeout: 1s}
upstream_breaker: {failures: 3, open_for: 10s, half_open_requests: 2}
queue: {max_wait: 1s, starvation_after: 500ms}
`

// TestPodRestartOpensProbesAndClosesBreaker: a pod that goes away while it
// restarts opens its error breaker after upstream_breaker.failures; while open
// no request reaches it (clients hear 503 with Retry-After); after open_for
// the breaker lets probes through, and their successes close it.
func TestPodRestartOpensProbesAndClosesBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := config.Parse([]byte(restartPolicy))
		if err != nil {
			t.Fatal(err)
		}
		pod := &restartingPod{}
		a, err := newApp(cfg, appOptions{transport: pod})
		if err != nil {
			t.Fatal(err)
		}
		defer a.close()
		send := func() *httptest.ResponseRecorder {
			req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/completions",
				strings.NewReader(`{"model":"m","prompt":"x","max_tokens":4}`))
			rec := httptest.NewRecorder()
			a.handler.ServeHTTP(rec, req)
			return rec
		}
		breakerState := func() string { st, _ := a.pods.BreakerState("pod"); return st.String() }

		for i := range 3 {
			if rec := send(); rec.Code != http.StatusBadGateway {
				t.Fatalf("request %d while the pod is down = %d, want 502", i, rec.Code)
			}
		}
		if got := pod.arrivals.Load(); got != 3 {
			t.Fatalf("arrivals = %d, want 3", got)
		}
		for i := range 5 {
			rec := send()
			if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
				t.Fatalf("request %d with the breaker open = %d %v, want 503 with Retry-After", i, rec.Code, rec.Header())
			}
		}
		if got := pod.arrivals.Load(); got != 3 {
			t.Fatalf("arrivals = %d while the breaker is open, want still 3", got)
		}

		pod.up.Store(true) // the pod is back before open_for ends
		time.Sleep(9 * time.Second)
		synctest.Wait()
		if rec := send(); rec.Code != http.StatusServiceUnavailable || pod.arrivals.Load() != 3 {
			t.Fatalf("before open_for: %d with %d arrivals, want 503 and no traffic", rec.Code, pod.arrivals.Load())
		}
		time.Sleep(2 * time.Second) // past open_for: probes go through
		synctest.Wait()
		for i := range 2 {
			if rec := send(); rec.Code != http.StatusOK {
				t.Fatalf("probe %d after open_for = %d %s, want 200", i, rec.Code, rec.Body)
			}
		}
		if got := breakerState(); got != "closed" {
			t.Fatalf("breaker after two good probes = %s, want closed", got)
		}
		for range 5 {
			if rec := send(); rec.Code != http.StatusOK {
				t.Fatalf("after the breaker closed = %d, want 200", rec.Code)
			}
		}
		if got := pod.arrivals.Load(); got != 3+2+5 {
			t.Errorf("arrivals = %d, want 10", got)
		}
	})
}

// flakyPod answers 500 like vLLM after its engine died of an OOM.
func TestPodOOM500sOpenBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := config.Parse([]byte(restartPolicy))
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		arrivals := 0
		pod := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			arrivals++
			mu.Unlock()
			_, _ = io.Copy(io.Discard, r.Body)
			return &http.Response{StatusCode: 500, Header: http.Header{"Content-Type": {"application/json"}},
				Body:    io.NopCloser(strings.NewReader(`{"object":"error","message":"EngineCore encountered an issue","type":"InternalServerError","code":500}`)),
				Request: r}, nil
		})
		a, err := newApp(cfg, appOptions{transport: pod})
		if err != nil {
			t.Fatal(err)
		}
		defer a.close()
		codes := map[int]int{}
		for range 6 {
			req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/completions",
				strings.NewReader(`{"model":"m","prompt":"x","max_tokens":4}`))
			rec := httptest.NewRecorder()
			a.handler.ServeHTTP(rec, req)
			codes[rec.Code]++
		}
		mu.Lock()
		defer mu.Unlock()
		if codes[500] != 3 || codes[503] != 3 || arrivals != 3 {
			t.Errorf("codes = %v with %d arrivals; want three 500s passed through, then 503 with the pod spared", codes, arrivals)
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestClientLeavesWhileQueuedFreesTheQueue: with the pod's one slot taken, a
// queued request whose client leaves is never sent upstream, and the queue's
// own stats show no waiter and no slot left behind.
func TestClientLeavesWhileQueuedFreesTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := config.Parse([]byte(`
upstreams: [{name: pod, url: "http://pod.invalid:8000", max_inflight: 1, min_inflight: 1}]
fast_breaker: {qps: 0}
health_check: {interval: 1h, timeout: 1s}
`))
		if err != nil {
			t.Fatal(err)
		}
		pod := newFakePod()
		a, err := newApp(cfg, appOptions{transport: pod})
		if err != nil {
			t.Fatal(err)
		}
		defer a.close()
		r := &slowRig{t: t, a: a, pod: pod}
		first := r.send(t.Context(), "first")
		synctest.Wait()
		ctx, cancel := context.WithCancel(t.Context())
		second := r.send(ctx, "second")
		synctest.Wait()
		if st := a.queue.Stats(); st.Length != 1 || st.Windows[0].InFlight != 1 {
			t.Fatalf("queue = %+v, want one waiter behind one request in flight", st)
		}
		cancel()
		<-second
		if st := a.queue.Stats(); st.Length != 0 || st.Tokens != 0 || st.Windows[0].InFlight != 1 {
			t.Fatalf("after the client left: queue = %+v, want no waiter, one in flight", st)
		}
		pod.release <- struct{}{}
		if rec := <-first; rec.Code != 200 {
			t.Errorf("first = %d, want 200", rec.Code)
		}
		r.wg.Wait()
		if st := a.queue.Stats(); st.Length != 0 || st.Windows[0].InFlight != 0 {
			t.Errorf("at the end: queue = %+v, want empty with no slot held", st)
		}
		if _, _, arrivals := pod.stats(); len(arrivals) != 1 || arrivals[0] != "first" {
			t.Errorf("pod saw %q, want only the first request", arrivals)
		}
	})
}

// TestOnStaleApplies: the pod's pressure source goes stale; what the level
// does then is the policy's on_stale (degrade: at least degraded; hold: the
// last level; ignore: as if the signal were absent).
func TestOnStaleApplies(t *testing.T) {
	tests := []struct {
		onStale string
		before  float64 // the last fresh fragmentation ratio
		want    string  // level after ten stale rounds
	}{
		{"degrade", 1.0, "degraded"},
		{"hold", 1.6, "critical"},
		{"hold", 1.0, "normal"},
		{"ignore", 1.6, "normal"},
		{"ignore", 1.0, "normal"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s after %v", tt.onStale, tt.before), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				policy := strings.Replace(slowPolicy, "pressure: {hold: 5s, hysteresis: 0.05,",
					"pressure: {hold: 5s, hysteresis: 0.05, on_stale: "+tt.onStale+",", 1)
				cfg, err := config.Parse([]byte(policy))
				if err != nil {
					t.Fatal(err)
				}
				pod := newFakePod()
				a, err := newApp(cfg, appOptions{transport: pod})
				if err != nil {
					t.Fatal(err)
				}
				defer a.close()
				r := &slowRig{t: t, a: a, pod: pod}
				r.fragmentation(tt.before)
				for range 10 {
					time.Sleep(time.Second)
					a.slow.Observe(pressure.State{
						Sources: []pressure.SourceState{{Name: "pod/vllm", Upstream: "pod", Stale: true, LastError: "connection refused"}},
						Upstreams: []pressure.UpstreamState{{Name: "pod",
							Signals: map[pressure.Signal]pressure.Value{pressure.Fragmentation: {Value: tt.before, Stale: true}}}},
					})
				}
				if got := a.snapshot().Upstreams[0].Level; got != tt.want {
					t.Errorf("level after the source went stale = %s, want %s", got, tt.want)
				}
			})
		})
	}
}

// TestReloadRebuildsOpenBreaker: a reload that changes upstream_breaker
// rebuilds the breaker closed, and the pod must become available again
// (its "open" flag is not carried over from the old breaker).
func TestReloadRebuildsOpenBreaker(t *testing.T) {
	const base = "upstreams: [{name: pod, url: 'http://pod.invalid:8000'}]\nfast_breaker: {qps: 0}\n"
	cfg, err := config.Parse([]byte(base + "upstream_breaker: {failures: 1, open_for: 1h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	fail := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 500, Body: io.NopCloser(strings.NewReader("{}")), Request: r}, nil
	})
	a, err := newApp(cfg, appOptions{transport: fail})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	a.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(`{"model":"m","prompt":"x"}`)))
	if up := a.pods.Statuses()[0]; !up.BreakerOpen || up.Available {
		t.Fatalf("after one 500 with failures: 1, upstream = %+v, want its breaker open", up)
	}
	next, err := config.Parse([]byte(base + "upstream_breaker: {failures: 3, open_for: 1h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.policy.Set(next); err != nil {
		t.Fatal(err)
	}
	if up := a.pods.Statuses()[0]; up.BreakerOpen || !up.Available {
		t.Errorf("after a reload that rebuilt the breaker, upstream = %+v, want closed and available", up)
	}
}
