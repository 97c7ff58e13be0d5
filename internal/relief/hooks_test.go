package relief

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// hookRoundTrip adapts a function to http.RoundTripper.
type hookRoundTrip func(*http.Request) (*http.Response, error)

func (f hookRoundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// hookResults collects what OnResult receives.
type hookResults chan Result

func (c hookResults) add(r Result) { c <- r }

// next waits for the next result.
func (c hookResults) next(t *testing.T) Result {
	t.Helper()
	return <-c
}

// none fails the test if a result is pending.
func (c hookResults) none(t *testing.T) {
	t.Helper()
	select {
	case r := <-c:
		t.Fatalf("unexpected hook result %+v", r)
	default:
	}
}

// startHookRunner builds a runner reporting into a fresh hookResults and runs
// it until the returned stop is called (or the test ends). stop returns once
// Run has returned.
func startHookRunner(t *testing.T, client *http.Client) (*Runner, hookResults, func()) {
	t.Helper()
	res := make(hookResults, 4096)
	r, err := New(Settings{Client: client, OnResult: res.add})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run() = %v, want nil", err)
			}
		})
	}
	t.Cleanup(stop)
	return r, res, stop
}

// blockingPod answers 204 once release is closed; entered receives each
// request's path as it arrives.
func blockingPod(t *testing.T) (srv *httptest.Server, entered chan string, release chan struct{}) {
	t.Helper()
	entered, release = make(chan string, 16), make(chan struct{})
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- r.URL.Path
		select {
		case <-release:
			w.WriteHeader(http.StatusNoContent)
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	return srv, entered, release
}

func TestHookRequestShape(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, body, host, token, ctype, ua string
		length                               int64
	}
	tests := []struct {
		name string
		hook Hook
		want seen
	}{
		{"post with headers and body",
			Hook{Method: "POST", Headers: map[string]string{"X-Token": "s3cret", "Content-Type": "application/json", "Host": "pod-0.internal"}, Body: `{"gpu":"0"}`},
			seen{method: "POST", body: `{"gpu":"0"}`, host: "pod-0.internal", token: "s3cret", ctype: "application/json", ua: "gatekeeper-hook", length: 11}},
		{"empty method is POST without a body",
			Hook{},
			seen{method: "POST", ua: "gatekeeper-hook"}},
		{"lower-case method",
			Hook{Method: "get"},
			seen{method: "GET", ua: "gatekeeper-hook"}},
		{"own user agent",
			Hook{Method: "PUT", Headers: map[string]string{"User-Agent": "relief/1"}, Body: "x"},
			seen{method: "PUT", body: "x", ua: "relief/1", length: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := make(chan seen, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got <- seen{method: r.Method, body: string(b), host: r.Host, token: r.Header.Get("X-Token"),
					ctype: r.Header.Get("Content-Type"), ua: r.Header.Get("User-Agent"), length: r.ContentLength}
				w.WriteHeader(http.StatusNoContent)
			}))
			t.Cleanup(srv.Close)
			r, res, _ := startHookRunner(t, srv.Client())
			h := tt.hook
			h.URL = srv.URL + "/reset_prefix_cache"
			r.Fire("degraded", "vllm-0", []Hook{h})
			s := <-got
			want := tt.want
			if want.host == "" {
				want.host = strings.TrimPrefix(srv.URL, "http://")
			}
			if s != want {
				t.Errorf("pod saw %+v, want %+v", s, want)
			}
			rs := res.next(t)
			if rs.Outcome() != "ok" || rs.Status != http.StatusNoContent || rs.Err != nil || rs.Method != want.method ||
				rs.Level != "degraded" || rs.Upstream != "vllm-0" || rs.URL != h.URL {
				t.Errorf("result = %+v (%s), want ok 204 for degraded vllm-0 %s %s", rs, rs.Outcome(), want.method, h.URL)
			}
		})
	}
}

func TestHookStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status  int
		outcome string
	}{
		{http.StatusOK, "ok"},
		{http.StatusNoContent, "ok"},
		{http.StatusFound, "error"}, // the built-in client does not follow redirects
		{http.StatusNotFound, "error"},
		{http.StatusInternalServerError, "error"},
		{http.StatusServiceUnavailable, "error"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var paths []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				paths = append(paths, r.URL.Path)
				mu.Unlock()
				if tt.status == http.StatusFound {
					http.Redirect(w, r, "/elsewhere", tt.status)
					return
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, `{"detail":"x"}`)
			}))
			t.Cleanup(srv.Close)
			r, res, _ := startHookRunner(t, nil) // the runner's own client
			r.Fire("critical", "vllm-0", []Hook{{URL: srv.URL + "/empty_cache"}})
			rs := res.next(t)
			if rs.Outcome() != tt.outcome || rs.Status != tt.status {
				t.Errorf("result = %+v (%s), want %s with status %d", rs, rs.Outcome(), tt.outcome, tt.status)
			}
			if wantErr := tt.outcome != "ok"; wantErr != errors.Is(rs.Err, ErrStatus) {
				t.Errorf("result error = %v, want ErrStatus: %v", rs.Err, wantErr)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(paths) != 1 || paths[0] != "/empty_cache" {
				t.Errorf("pod saw %v, want one call to /empty_cache", paths)
			}
		})
	}
}

func TestHookFiresInBackground(t *testing.T) {
	t.Parallel()
	srv, entered, release := blockingPod(t)
	r, res, _ := startHookRunner(t, srv.Client())
	r.Fire("degraded", "vllm-0", []Hook{{URL: srv.URL + "/a"}, {URL: srv.URL + "/b"}})
	// Fire has returned while both calls are held inside the pod.
	got := map[string]bool{<-entered: true, <-entered: true}
	if !got["/a"] || !got["/b"] {
		t.Fatalf("pod saw %v, want /a and /b", got)
	}
	res.none(t)
	close(release)
	for range 2 {
		if rs := res.next(t); rs.Outcome() != "ok" {
			t.Errorf("result = %+v, want ok", rs)
		}
	}
}

func TestHookSkipsWhileInFlight(t *testing.T) {
	t.Parallel()
	srv, entered, release := blockingPod(t)
	r, res, _ := startHookRunner(t, srv.Client())
	hook := []Hook{{Method: "POST", URL: srv.URL + "/reset_prefix_cache"}}
	r.Fire("degraded", "vllm-0", hook)
	<-entered

	r.Fire("degraded", "vllm-0", []Hook{{Method: "post", URL: hook[0].URL}}) // same hook: method is case-blind
	rs := res.next(t)                                                        // reported by Fire itself
	if !rs.Skipped || rs.Outcome() != "skipped" || rs.Upstream != "vllm-0" || rs.Level != "degraded" || rs.Method != "POST" {
		t.Fatalf("second Fire result = %+v, want skipped", rs)
	}
	res.none(t)

	// Another upstream, level or method is another hook.
	r.Fire("degraded", "vllm-1", hook)
	r.Fire("critical", "vllm-0", hook)
	r.Fire("degraded", "vllm-0", []Hook{{Method: "PUT", URL: hook[0].URL}})
	for range 3 {
		<-entered
	}
	res.none(t)
	close(release)
	for range 4 {
		if rs := res.next(t); rs.Outcome() != "ok" {
			t.Errorf("result = %+v, want ok", rs)
		}
	}
	// Once the call has reported, the hook may fire again.
	r.Fire("degraded", "vllm-0", hook)
	<-entered
	if rs := res.next(t); rs.Outcome() != "ok" {
		t.Errorf("Fire after completion = %+v, want ok", rs)
	}
}

// hookCounter counts calls; safe for concurrent use.
type hookCounter struct {
	mu sync.Mutex
	n  int
}

func (c *hookCounter) inc() { c.mu.Lock(); c.n++; c.mu.Unlock() }
func (c *hookCounter) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// hookBlockingClient is a client whose calls wait for their context to end;
// calls counts the calls made.
func hookBlockingClient(calls *hookCounter) *http.Client {
	return &http.Client{Transport: hookRoundTrip(func(req *http.Request) (*http.Response, error) {
		calls.inc()
		<-req.Context().Done()
		return nil, req.Context().Err()
	})}
}

func TestHookTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		timeout, want time.Duration
	}{
		{0, 5 * time.Second},
		{-time.Second, 5 * time.Second},
		{2 * time.Second, 2 * time.Second},
		{30 * time.Second, 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.timeout.String(), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var calls hookCounter
				r, res, _ := startHookRunner(t, hookBlockingClient(&calls))
				r.Fire("degraded", "vllm-0", []Hook{{URL: "http://pod/slow", Timeout: tt.timeout}})
				rs := res.next(t) // fake time runs until the call's deadline
				if rs.Outcome() != "timeout" || !errors.Is(rs.Err, context.DeadlineExceeded) || rs.Status != 0 {
					t.Errorf("result = %+v (%s), want a timeout", rs, rs.Outcome())
				}
				if rs.Duration != tt.want {
					t.Errorf("result Duration = %v, want %v", rs.Duration, tt.want)
				}
				if calls.get() != 1 {
					t.Errorf("calls = %d, want 1", calls.get())
				}
			})
		})
	}
}

func TestHookRunCancelsInFlight(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var calls hookCounter
		r, res, stop := startHookRunner(t, hookBlockingClient(&calls))
		r.Fire("critical", "vllm-0", []Hook{{URL: "http://pod/a", Timeout: time.Hour}, {URL: "http://pod/b", Timeout: time.Hour}})
		synctest.Wait() // both calls are blocked in the transport
		res.none(t)
		stop() // returns only after both calls have reported and exited
		if len(res) != 2 {
			t.Fatalf("results when Run returned = %d, want 2", len(res))
		}
		for range 2 {
			if rs := res.next(t); rs.Outcome() != "canceled" || !errors.Is(rs.Err, context.Canceled) {
				t.Errorf("result = %+v (%s), want canceled", rs, rs.Outcome())
			}
		}
		r.Fire("critical", "vllm-0", []Hook{{URL: "http://pod/c"}})
		synctest.Wait()
		res.none(t)
		if calls.get() != 2 {
			t.Errorf("calls = %d, want 2: Fire after Run must do nothing", calls.get())
		}
	})
}

func TestHookRunCancelsRealRequest(t *testing.T) {
	t.Parallel()
	srv, entered, _ := blockingPod(t)
	r, res, stop := startHookRunner(t, srv.Client())
	r.Fire("degraded", "vllm-0", []Hook{{URL: srv.URL + "/reset_prefix_cache"}})
	<-entered
	stop()
	if len(res) != 1 {
		t.Fatalf("results when Run returned = %d, want 1", len(res))
	}
	if rs := res.next(t); rs.Outcome() != "canceled" {
		t.Errorf("result = %+v (%s), want canceled", rs, rs.Outcome())
	}
}

// endlessBody never ends; it counts what was read and whether it was closed.
type endlessBody struct {
	mu     sync.Mutex
	n      int64
	closed bool
}

func (b *endlessBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n += int64(len(p))
	return len(p), nil
}

func (b *endlessBody) Close() error { b.mu.Lock(); b.closed = true; b.mu.Unlock(); return nil }

func TestHookAnswers(t *testing.T) {
	t.Parallel()
	body := &endlessBody{}
	tests := []struct {
		name    string
		url     string
		rt      hookRoundTrip
		outcome string
		calls   int
	}{
		{"an endless body is read only so far", "http://pod/a", func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusOK, Body: body}, nil
		}, "ok", 1},
		{"a transport error fails", "http://pod/a", func(*http.Request) (*http.Response, error) {
			return nil, errors.New("connection refused")
		}, "error", 1},
		{"a malformed URL fails without a call", "http://[::1", nil, "error", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls hookCounter
			client := &http.Client{Transport: hookRoundTrip(func(req *http.Request) (*http.Response, error) {
				calls.inc()
				return tt.rt(req)
			})}
			r, res, _ := startHookRunner(t, client)
			r.Fire("recovered", "vllm-0", []Hook{{URL: tt.url}})
			if rs := res.next(t); rs.Outcome() != tt.outcome {
				t.Errorf("result = %+v (%s), want %s", rs, rs.Outcome(), tt.outcome)
			}
			if calls.get() != tt.calls {
				t.Errorf("calls = %d, want %d", calls.get(), tt.calls)
			}
		})
	}
	body.mu.Lock()
	defer body.mu.Unlock()
	if body.n > hookBodyLimit || !body.closed {
		t.Errorf("endless body: read %d bytes, closed %v; want at most %d and closed", body.n, body.closed, hookBodyLimit)
	}
}

func TestNewRefusesDefaultClient(t *testing.T) {
	t.Parallel()
	if _, err := New(Settings{Client: http.DefaultClient}); err == nil || !strings.Contains(err.Error(), "Settings.Client") {
		t.Fatalf("New(DefaultClient) = %v, want an error naming Settings.Client", err)
	}
}

func TestHookFireConcurrent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	active, most := map[string]int{}, 0
	client := &http.Client{Transport: hookRoundTrip(func(req *http.Request) (*http.Response, error) {
		key := req.Method + " " + req.URL.String() + " " + req.Header.Get("X-Key")
		mu.Lock()
		active[key]++
		most = max(most, active[key])
		mu.Unlock()
		defer func() { mu.Lock(); active[key]--; mu.Unlock() }()
		return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody}, nil
	})}
	r, res, stop := startHookRunner(t, client)
	const goroutines, fires = 8, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range fires {
				up := fmt.Sprintf("vllm-%d", (g+i)%2)
				r.Fire("degraded", up, []Hook{{URL: "http://pod/reset", Headers: map[string]string{"X-Key": up}}})
			}
		})
	}
	wg.Wait()
	stop()
	counts := map[string]int{}
	for len(res) > 0 {
		counts[res.next(t).Outcome()]++
	}
	if counts["ok"]+counts["skipped"] != goroutines*fires || len(counts) > 2 || counts["ok"] < 2 {
		t.Errorf("results = %v, want %d, each ok or skipped, at least one ok per upstream", counts, goroutines*fires)
	}
	if most > 1 {
		t.Errorf("most calls in flight for one hook = %d, want 1", most)
	}
}

func ExampleRunner() {
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent) // vLLM's /reset_prefix_cache answers 200; any 2xx is fine
	}))
	defer pod.Close()

	results := make(chan Result, 1)
	r, err := New(Settings{OnResult: func(res Result) { results <- res }})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }() // cmd runs it for the process's life

	// On entering degraded; never blocks the caller.
	r.Fire("degraded", "vllm-0", []Hook{{Method: "POST", URL: pod.URL + "/reset_prefix_cache", Timeout: 5 * time.Second}})
	res := <-results
	fmt.Println(res.Level, res.Upstream, res.Method, strings.TrimPrefix(res.URL, pod.URL), res.Status, res.Outcome())

	cancel()
	fmt.Println("run:", <-done)
	// Output:
	// degraded vllm-0 POST /reset_prefix_cache 204 ok
	// run: <nil>
}

// TestOutcomes: Outcomes lists exactly the values Outcome returns.
func TestOutcomes(t *testing.T) {
	got := map[string]bool{}
	for _, r := range []Result{{Skipped: true}, {}, {Err: context.DeadlineExceeded}, {Err: context.Canceled},
		{Err: errors.New("HTTP 500")}} {
		got[r.Outcome()] = true
	}
	if len(got) != len(Outcomes) {
		t.Errorf("Outcome returns %v, Outcomes lists %v", got, Outcomes)
	}
	for _, o := range Outcomes {
		if !got[o] {
			t.Errorf("Outcomes lists %q, which Outcome never returns", o)
		}
	}
}
