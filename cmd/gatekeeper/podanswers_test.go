package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// scriptPod is a pod on loopback that answers its first len(codes)
// completions with those statuses (with retryAfter on 503/429 when set),
// then 200.
func scriptPod(t *testing.T, retryAfter string, codes ...int) (url string, hits *atomic.Int32) {
	t.Helper()
	hits = &atomic.Int32{}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n := int(hits.Add(1))
		code := 200
		if n <= len(codes) {
			code = codes[n-1]
		}
		w.Header().Set("Content-Type", "application/json")
		if retryAfter != "" && (code == 503 || code == 429) {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(code)
		_, _ = fmt.Fprintf(w, `{"pod_status":%d}`, code)
	})
	return newPodServer(t, mux), hits
}

func complete(t *testing.T, a *app) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	a.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions",
		strings.NewReader(`{"model":"m","prompt":"x","max_tokens":4}`)))
	return rec
}

func podApp(t *testing.T, upstreams string) *app {
	t.Helper()
	return podAppWith(t, upstreams, "", appOptions{})
}

// podAppWith is podApp with more policy and the app's options.
func podAppWith(t *testing.T, upstreams, extra string, opts appOptions) *app {
	t.Helper()
	a, err := newApp(mustParse(t, "upstreams: "+upstreams+`
fast_breaker: {qps: 0}
health_check: {interval: 1h}
upstream_breaker: {failures: 5, open_for: 1h}
shed: {retry_after: 3s}
`+extra), opts)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// frozenClock is a clock tests move by hand, read from any goroutine.
type frozenClock struct{ ns atomic.Int64 }

func newFrozenClock() *frozenClock {
	c := &frozenClock{}
	c.ns.Store(time.Unix(1_800_000_000, 0).UnixNano())
	return c
}

func (c *frozenClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *frozenClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestPodOverloadIsNotFailure: a pod's own 503 (vLLM's full queue) or 429,
// eight times in a row, does not open its error breaker: each is passed on
// with the pod's Retry-After (or gatekeeper's) and the reason
// upstream_overloaded, the next request is served at once, and the pod's
// window is cut as if it were degraded. 500s still open the breaker.
func TestPodOverloadIsNotFailure(t *testing.T) {
	for _, tt := range []struct {
		name       string
		code       int
		retryAfter string // the pod's
		wantRA     string
	}{
		{name: "503 with Retry-After", code: 503, retryAfter: "7", wantRA: "7"},
		{name: "429 without Retry-After", code: 429, wantRA: "3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			codes := make([]int, 8)
			for i := range codes {
				codes[i] = tt.code
			}
			pod, hits := scriptPod(t, tt.retryAfter, codes...)
			clock := newFrozenClock() // the eight refusals come within one second
			a := podAppWith(t, `[{name: pod, url: "`+pod+`", max_inflight: 10}]`, "", appOptions{now: clock.now})
			for i := range 8 {
				rec := complete(t, a)
				if rec.Code != tt.code || rec.Header().Get("Retry-After") != tt.wantRA ||
					rec.Header().Get("X-Gatekeeper-Reason") != "upstream_overloaded" ||
					!strings.Contains(rec.Body.String(), `"pod_status"`) {
					t.Fatalf("request %d = %d Retry-After %q reason %q body %s; want the pod's %d with Retry-After %s",
						i, rec.Code, rec.Header().Get("Retry-After"), rec.Header().Get("X-Gatekeeper-Reason"),
						rec.Body.String(), tt.code, tt.wantRA)
				}
			}
			if st, _ := a.pods.BreakerState("pod"); st != breaker.Closed {
				t.Fatalf("error breaker %v after 8 refusals, want closed", st)
			}
			if rec := complete(t, a); rec.Code != 200 || hits.Load() != 9 {
				t.Fatalf("9th request = %d (pod saw %d), want 200 at once", rec.Code, hits.Load())
			}
			if n := outcomeCounts(t, a)["upstream_overloaded"]; n != 8 {
				t.Errorf("outcome upstream_overloaded = %v, want 8", n)
			}
			a.slow.Observe(pressure.State{}) // the next pressure round
			if st, _, _ := a.ctl.State("pod"); st.Level != breaker.Degraded || st.Limit != 8 {
				t.Errorf("after the refusals the pod is %v with window %d, want degraded at 8", st.Level, st.Limit)
			}
		})
	}
	t.Run("500s still open the breaker", func(t *testing.T) {
		pod, _ := scriptPod(t, "", 500, 500, 500, 500, 500)
		a := podApp(t, `[{name: pod, url: "`+pod+`"}]`)
		for range 5 {
			if rec := complete(t, a); rec.Code != 500 {
				t.Fatalf("request = %d, want the pod's 500", rec.Code)
			}
		}
		rec := complete(t, a)
		if st, _ := a.pods.BreakerState("pod"); st != breaker.Open || rec.Code != 503 ||
			rec.Header().Get("X-Gatekeeper-Reason") != "no_upstream" || !strings.Contains(rec.Body.String(), "error breaker open") {
			t.Fatalf("breaker %v, next request %d %s; want open and 503 no_upstream naming the breaker", st, rec.Code, rec.Body.String())
		}
		if n := outcomeCounts(t, a)["no_upstream"]; n != 1 {
			t.Errorf("outcome no_upstream = %v, want 1 (not overloaded: a dead pod is not GPU pressure)", n)
		}
	})
}

// TestRefusalBurstDegradesAtOnce: a pod without any pressure source
// answers three requests 503 in a row, a burst far shorter than a poll.
// The third refusal runs a round at once (pressure.interval is an hour
// here, so no poll could have), which degrades the pod and cuts its
// window; two refusals do not. With the default interval and still no
// source, rounds go on, and the pod recovers once hold has passed without
// refusals. The controller's clock is the test's; rounds are awaited on
// the app's "pressure" stage, bounded.
func TestRefusalBurstDegradesAtOnce(t *testing.T) {
	for _, tt := range []struct {
		name     string
		pressure string
		recover  bool
	}{
		{"the third refusal runs a round", "{interval: 1h, stale_after: 2h}", false},
		{"rounds go on without sources: it recovers", "{}", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pod, _ := scriptPod(t, "", 503, 503, 503)
			clock := newFrozenClock()
			rounds := make(chan struct{}, 64)
			a := podAppWith(t, `[{name: pod, url: "`+pod+`", max_inflight: 10}]`,
				"pressure: "+tt.pressure+"\n", appOptions{now: clock.now, stage: func(name string) {
					if name == "pressure" {
						select {
						case rounds <- struct{}{}:
						default:
						}
					}
				}})
			ctx, cancel := context.WithCancel(t.Context())
			a.pressure.Start(ctx)
			t.Cleanup(func() { cancel(); a.pressure.Stop() })
			round := func() {
				t.Helper()
				select {
				case <-rounds:
				case <-time.After(20 * time.Second): // a bound, not a wait for state
					t.Fatal("no pressure round within 20 s")
				}
			}
			level := func() (breaker.Level, int) {
				st, _, _ := a.ctl.State("pod")
				return st.Level, st.Limit
			}
			for i := range 2 {
				if rec := complete(t, a); rec.Code != 503 {
					t.Fatalf("request %d = %d, want the pod's 503", i, rec.Code)
				}
			}
			if !tt.recover { // no poll for an hour: any round is one asked for
				select {
				case <-rounds:
					t.Fatal("a round ran after two refusals; only the third asks for one")
				default:
				}
			}
			if rec := complete(t, a); rec.Code != 503 {
				t.Fatalf("third request = %d, want the pod's 503", rec.Code)
			}
			round()
			if l, w := level(); l != breaker.Degraded || w != 8 {
				t.Fatalf("after the third refusal the pod is %v with window %d, want degraded at 8", l, w)
			}
			if !tt.recover {
				return
			}
			for i := 0; ; i++ { // each round a second later; hold is 5 s
				clock.advance(time.Second)
				round()
				if l, _ := level(); l == breaker.Normal {
					break
				}
				if i == 30 {
					t.Fatal("still degraded 30 rounds and 30 s without refusals")
				}
			}
			if rec := complete(t, a); rec.Code != 200 {
				t.Fatalf("request after recovery = %d, want 200", rec.Code)
			}
		})
	}
}

// TestRetryBeforeSendLandsOnceOnTheOtherPod: a request that one pod refused
// before sending any body byte, or that could not be sent to it at all,
// goes to the other pod exactly once.
func TestRetryBeforeSendLandsOnceOnTheOtherPod(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + closed.Addr().String()
	closed.Close() // nothing listens: a dial error
	for _, tt := range []struct{ name, first string }{
		{name: "the pod's own 503", first: "overloaded"},
		{name: "a connection that could not be opened", first: "dead"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a503, aHits := scriptPod(t, "1", 503, 503, 503)
			first := a503
			if tt.first == "dead" {
				first = deadURL
			}
			b, bHits := scriptPod(t, "")
			app := podApp(t, `[{name: a, url: "`+first+`"}, {name: b, url: "`+b+`"}]`)
			rec := complete(t, app)
			if rec.Code != 200 || bHits.Load() != 1 {
				t.Fatalf("request = %d %s, pod b saw %d; want 200 from b, once", rec.Code, rec.Body.String(), bHits.Load())
			}
			if tt.first == "overloaded" && aHits.Load() != 1 {
				t.Fatalf("pod a saw %d, want 1", aHits.Load())
			}
			if n := outcomeCounts(t, app)["served"]; n != 1 {
				t.Errorf("served = %v, want 1: one outcome for the retried request", n)
			}
		})
	}
}
