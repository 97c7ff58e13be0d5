package healthcheck

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/syncbuf"
)

// rig is a registry of one pod and a Checker over it that records what it
// reports.
type rig struct {
	reg      *pods.Registry
	c        *Checker
	mu       sync.Mutex
	observed []bool
	dispatch atomic.Int32
}

func newRig(t *testing.T, rawURL string, rt http.RoundTripper, s Settings, discover bool) *rig {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	g := &rig{reg: pods.New(nil)}
	g.reg.Set([]pods.Pod{{Name: "pod", URL: u, DiscoverModels: discover}})
	g.c = &Checker{Registry: g.reg, Settings: s, Transport: rt,
		Observed: func(pod string, ok bool) {
			g.mu.Lock()
			g.observed = append(g.observed, ok)
			g.mu.Unlock()
		},
		Dispatch: func() { g.dispatch.Add(1) }}
	return g
}

func (g *rig) healthy(t *testing.T) bool {
	t.Helper()
	m, ok := g.reg.Get("pod")
	if !ok {
		t.Fatal("pod gone")
	}
	return m.Healthy()
}

func (g *rig) observations() []bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]bool(nil), g.observed...)
}

// countingRT counts the requests it forwards, by path.
type countingRT struct {
	next  http.RoundTripper
	mu    sync.Mutex
	paths []string
}

func (c *countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.paths = append(c.paths, r.URL.Path)
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *countingRT) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.paths...)
}

// A pod turns unhealthy after UnhealthyAfter failures in a row and healthy
// after HealthyAfter successes; every round, and every flip, asks the queue
// to dispatch again; each check is observed; the check goes through the
// transport it was handed, to the path it was given.
func TestCheckAllThresholds(t *testing.T) {
	t.Parallel()
	var status atomic.Int32
	status.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ping" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	rt := &countingRT{next: srv.Client().Transport}
	g := newRig(t, srv.URL, rt, Settings{Path: "/ping", UnhealthyAfter: 2, HealthyAfter: 2}, false)
	logs := &syncbuf.Buffer{}
	g.c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	var recovered atomic.Int32
	g.c.Recovered = func(pod string) {
		if pod == "pod" {
			recovered.Add(1)
		}
	}
	steps := []struct {
		status       int
		healthy      bool
		dispatchings int32 // this round's: one per round, one more per flip
		recovered    int32 // this round's Recovered calls: one when it came back
	}{
		{http.StatusOK, true, 1, 0},
		{http.StatusServiceUnavailable, true, 1, 0}, // one failure of two
		{http.StatusInternalServerError, false, 2, 0},
		{http.StatusServiceUnavailable, false, 1, 0},
		{http.StatusOK, false, 1, 0}, // one success of two
		{http.StatusServiceUnavailable, false, 1, 0},
		{http.StatusOK, false, 1, 0},
		{http.StatusNoContent, true, 2, 1}, // any 2xx
	}
	for i, s := range steps {
		status.Store(int32(s.status))
		before, back := g.dispatch.Load(), recovered.Load()
		g.c.CheckAll(t.Context())
		if got := recovered.Load() - back; got != s.recovered {
			t.Errorf("step %d: Recovered called %d times, want %d", i, got, s.recovered)
		}
		if got := g.healthy(t); got != s.healthy {
			t.Errorf("step %d (%d): healthy = %v, want %v", i, s.status, got, s.healthy)
		}
		if got := g.dispatch.Load() - before; got != s.dispatchings {
			t.Errorf("step %d: Dispatch called %d times, want %d", i, got, s.dispatchings)
		}
		want := s.healthy
		if g.reg.Published("pod") == queue.Available != want {
			t.Errorf("step %d: Published = %v, want available %v", i, g.reg.Published("pod"), want)
		}
	}
	obs := g.observations()
	if len(obs) != len(steps) {
		t.Fatalf("observed %d checks, want %d", len(obs), len(steps))
	}
	for i, s := range steps {
		if obs[i] != (s.status/100 == 2) {
			t.Errorf("observation %d = %v for %d", i, obs[i], s.status)
		}
	}
	if n := strings.Count(logs.String(), "upstream health changed"); n != 2 {
		t.Errorf("logged %d health changes, want 2 (one per flip):\n%s", n, logs.String())
	}
	if paths := rt.seen(); len(paths) != len(steps) || paths[0] != "/ping" {
		t.Errorf("transport saw %v, want %d GET /ping", paths, len(steps))
	}
}

// A pod that discovers its models reads GET /v1/models after a passing
// check, and routes by the ids it lists.
func TestCheckAllDiscoversModels(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"qwen","object":"model"}]}`)
		}
	}))
	defer srv.Close()
	g := newRig(t, srv.URL, srv.Client().Transport, Settings{}, true)
	if _, served, unknown := g.reg.NotServing("qwen"); served || unknown != 1 {
		t.Fatalf("before a check: served %v unknown %d, want unknown", served, unknown)
	}
	g.c.CheckAll(t.Context())
	if skip, served, _ := g.reg.NotServing("qwen"); !served || len(skip) != 0 {
		t.Errorf("after a check: NotServing(qwen) = %v %v, want served", skip, served)
	}
}

// fakeRT answers in memory, so the check runs inside a synctest bubble:
// 200 while ok, else 503; while hang it waits for the request's end.
type fakeRT struct {
	ok, hang atomic.Bool
	calls    atomic.Int32
}

func (f *fakeRT) RoundTrip(r *http.Request) (*http.Response, error) {
	f.calls.Add(1)
	if f.hang.Load() {
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	code := http.StatusServiceUnavailable
	if f.ok.Load() {
		code = http.StatusOK
	}
	return &http.Response{StatusCode: code, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}

// Run checks at once, then every Interval, and returns when its context
// ends; a check that outlives Timeout fails.
func TestRunEveryIntervalUntilTheContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := &fakeRT{}
		rt.ok.Store(true)
		g := newRig(t, "http://pod.invalid:8000", rt, Settings{Interval: 5 * time.Second, Timeout: time.Second, UnhealthyAfter: 1}, false)
		ctx, cancel := context.WithCancel(t.Context())
		stopped := make(chan struct{})
		go func() {
			_ = g.c.Run(ctx)
			close(stopped)
		}()
		synctest.Wait()
		if got := rt.calls.Load(); got != 1 {
			t.Fatalf("checks at start = %d, want 1", got)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := rt.calls.Load(); got != 2 {
			t.Fatalf("checks after one interval = %d, want 2", got)
		}
		rt.hang.Store(true)
		time.Sleep(5 * time.Second) // the third check starts and hangs
		synctest.Wait()
		if !g.healthy(t) {
			t.Fatal("unhealthy before the check's timeout")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if g.healthy(t) {
			t.Error("a check past its timeout did not count as a failure")
		}
		cancel()
		synctest.Wait()
		select {
		case <-stopped:
		default:
			t.Fatal("Run did not return when its context ended")
		}
		time.Sleep(time.Minute)
		if got := rt.calls.Load(); got != 3 {
			t.Errorf("checks after the end = %d, want none more than 3", got)
		}
	})
}

// A check cut short by the end of its context reports nothing: the pod
// keeps its health, nothing is observed.
func TestCheckEndedByTheContextReportsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := &fakeRT{}
		rt.hang.Store(true)
		g := newRig(t, "http://pod.invalid:8000", rt, Settings{Timeout: time.Minute, UnhealthyAfter: 1}, false)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			g.c.CheckAll(ctx)
			close(done)
		}()
		synctest.Wait()
		cancel()
		<-done
		if !g.healthy(t) || len(g.observations()) != 0 {
			t.Errorf("healthy %v, observed %v; want healthy and nothing observed", g.healthy(t), g.observations())
		}
	})
}

// A negative Interval turns the check off: Run checks nothing and waits
// for its context.
func TestRunDisabled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := &fakeRT{}
		g := newRig(t, "http://pod.invalid:8000", rt, Settings{Interval: -1}, false)
		ctx, cancel := context.WithCancel(t.Context())
		stopped := make(chan struct{})
		go func() {
			_ = g.c.Run(ctx)
			close(stopped)
		}()
		time.Sleep(time.Hour)
		if got := rt.calls.Load(); got != 0 {
			t.Errorf("checks with Interval -1 = %d, want 0", got)
		}
		cancel()
		<-stopped
	})
}
