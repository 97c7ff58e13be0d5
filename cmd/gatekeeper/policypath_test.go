package main

import (
	"context"
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
)

func mustParse(t testing.TB, policy string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDiscoveryRoundNeverUndoesAReload: a discovery round that resolved for
// the policy in force when it started must not apply that policy after a
// SIGHUP reload replaced it during the lookup (issue 14: "after reload:
// qps=99" → "after discover round: qps=10").
func TestDiscoveryRoundNeverUndoesAReload(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	addrs := []string{"127.0.0.1"}
	var armed atomic.Bool // newApp's own first resolution is not the round's
	lookup := func(ctx context.Context, _ string) ([]string, error) {
		first := false
		if armed.Load() {
			once.Do(func() { first = true })
		}
		if first { // the discovery round's lookup: slow
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), addrs...), nil
	}
	const policy = "upstreams: [{name: pods, url: 'http://pods.test:8000', dns_interval: 1h}]\nfast_breaker: {qps: %s, burst: 5}\n"
	a, err := newApp(mustParse(t, strings.Replace(policy, "%s", "10", 1)), appOptions{lookup: lookup})
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true) // after newApp's own first resolution
	mu.Lock()
	addrs = []string{"127.0.0.1", "127.0.0.2"} // the round will find a change
	mu.Unlock()
	roundDone := make(chan error, 1)
	go func() { roundDone <- a.policy.Rediscover(t.Context()) }()
	<-entered
	if err := a.policy.Set(mustParse(t, strings.Replace(policy, "%s", "99", 1))); err != nil {
		t.Fatal(err)
	}
	if got := a.cfg().FastBreaker.QPS; got != 99 {
		t.Fatalf("after reload: qps=%v, want 99", got)
	}
	close(release)
	if err := <-roundDone; err != nil {
		t.Fatal(err)
	}
	if got := a.cfg().FastBreaker.QPS; got != 99 {
		t.Fatalf("after the discovery round: qps=%v, want 99 (the round applied the policy it started with)", got)
	}
	// The next round, on the running policy, applies the new addresses.
	if err := a.policy.Rediscover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n, qps := len(a.cfg().Upstreams), a.cfg().FastBreaker.QPS; n != 2 || qps != 99 {
		t.Fatalf("after the next round: %d upstreams, qps=%v; want 2 and 99", n, qps)
	}
}

// okTransport answers every request 200 with an empty JSON body.
type okTransport struct{}

func (okTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
}

// TestReloadThatFailsChangesNothing: a policy that one package refuses late
// (here the pressure monitor: a source kind it does not know, as a
// programming slip past config's checks would be) is refused whole. Before,
// the limiter, queue and upstreams had already changed while the log said
// the running policy was kept.
func TestReloadThatFailsChangesNothing(t *testing.T) {
	a, err := newApp(mustParse(t, `
upstreams: [{name: a, url: "http://127.0.0.1:1"}]
fast_breaker: {qps: 0.001, burst: 1}
health_check: {interval: 1h}
`), appOptions{transport: okTransport{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	if err := a.startLoops(ctx, &wg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	before := a.cfg()
	bad := mustParse(t, `
upstreams: [{name: a, url: "http://127.0.0.1:1"}, {name: b, url: "http://127.0.0.1:2"}]
fast_breaker: {qps: 1000, burst: 1000}
health_check: {interval: 1h}
`)
	bad.Upstreams[1].Sources = []config.Source{{Kind: "bogus", URL: "http://127.0.0.1:2/x", Name: "bogus"}}
	if err := a.policy.Set(bad); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("apply(bad) = %v, want the pressure monitor's refusal", err)
	}
	if a.cfg() != before {
		t.Fatal("the running policy changed")
	}
	if n := len(a.queue.Stats().Windows); n != 1 {
		t.Errorf("%d windows after a refused reload, want 1", n)
	}
	if ups := a.pods.Statuses(); len(ups) != 1 {
		t.Errorf("upstreams %+v after a refused reload, want a only", ups)
	}
	codes := []int{}
	for range 2 {
		rec := httptest.NewRecorder()
		a.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(`{"model":"m","prompt":"x"}`)))
		codes = append(codes, rec.Code)
	}
	if codes[0] != 200 || codes[1] != 429 {
		t.Errorf("two requests after the refused reload = %v, want [200 429]: the old limiter (burst 1) still runs", codes)
	}
}

// probePod answers each request with the next scripted status; 0 holds the
// request until the test sends its status on hold.
type probePod struct {
	hold chan int

	// mu guards script and seen.
	mu     sync.Mutex
	script []int
	seen   int
}

func (p *probePod) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	p.mu.Lock()
	code := 200
	if len(p.script) > 0 {
		code, p.script = p.script[0], p.script[1:]
	}
	p.seen++
	p.mu.Unlock()
	if code == 0 {
		select {
		case code = <-p.hold:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return &http.Response{StatusCode: code, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
}

func (p *probePod) requests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen
}

// TestHalfOpenPodWaiterGetsTheVerdict: one pod whose error breaker is
// half-open with its probe in flight. A request that arrives then waits for
// the probe's verdict, not for max_wait: it is dispatched as soon as the
// probe closes the breaker, or refused with 503 and Retry-After as soon as
// the probe reopens it.
func TestHalfOpenPodWaiterGetsTheVerdict(t *testing.T) {
	for _, tt := range []struct {
		name       string
		probe      int // the probe's answer
		wantStatus int
		wantReason string
	}{
		{name: "the probe succeeds", probe: 200, wantStatus: 200},
		{name: "the probe fails", probe: 500, wantStatus: 503, wantReason: "no_upstream"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				pod := &probePod{hold: make(chan int), script: []int{500, 0}}
				a, err := newApp(mustParse(t, `
upstreams: [{name: pod, url: "http://pod.invalid:8000"}]
fast_breaker: {qps: 0}
health_check: {interval: 1h, timeout: 1s}
upstream_breaker: {failures: 1, open_for: 10s, half_open_requests: 1}
queue: {max_wait: 5m, ttft_deadline: 0s}
`), appOptions{transport: pod})
				if err != nil {
					t.Fatal(err)
				}
				send := func() <-chan *httptest.ResponseRecorder {
					out := make(chan *httptest.ResponseRecorder, 1)
					go func() {
						rec := httptest.NewRecorder()
						a.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions",
							strings.NewReader(`{"model":"m","prompt":"x","max_tokens":4}`)))
						out <- rec
					}()
					return out
				}
				if rec := <-send(); rec.Code != 500 { // opens the breaker
					t.Fatalf("first request = %d, want the pod's 500", rec.Code)
				}
				time.Sleep(10*time.Second + time.Millisecond) // open_for has passed: the next look finds it half-open
				probe := send()
				synctest.Wait()
				start := time.Now()
				waiter := send()
				synctest.Wait()
				if n := pod.requests(); n != 2 {
					select {
					case rec := <-probe:
						t.Logf("probe answered %d %s", rec.Code, rec.Body.String())
					default:
					}
					t.Fatalf("the pod saw %d requests, want 2 (the waiter must wait for the probe)", n)
				}
				pod.hold <- tt.probe
				if rec := <-probe; rec.Code != tt.probe {
					t.Fatalf("probe = %d, want %d", rec.Code, tt.probe)
				}
				rec := <-waiter
				if waited := time.Since(start); waited > time.Second {
					t.Errorf("the waiter waited %v, want the probe's verdict at once", waited)
				}
				if rec.Code != tt.wantStatus || rec.Header().Get("X-Gatekeeper-Reason") != tt.wantReason {
					t.Fatalf("waiter = %d %q, want %d %q", rec.Code, rec.Header().Get("X-Gatekeeper-Reason"),
						tt.wantStatus, tt.wantReason)
				}
				if tt.wantStatus == 503 && rec.Header().Get("Retry-After") == "" {
					t.Error("503 without Retry-After")
				}
			})
		})
	}
}
