package proxy

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods/healthcheck"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// healthRT answers /health with 200 while ok is true, else 503.
type healthRT struct {
	ok    atomic.Bool
	calls atomic.Int32
}

func (h *healthRT) RoundTrip(r *http.Request) (*http.Response, error) {
	h.calls.Add(1)
	code := http.StatusServiceUnavailable
	if h.ok.Load() && r.URL.Path == "/health" {
		code = http.StatusOK
	}
	return &http.Response{StatusCode: code, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}

// The pods' health check (run beside the handler, as cmd/gatekeeper runs
// it) turns a pod unavailable and the handler unready, and back.
func TestHealthCheckFlipsAvailability(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := &healthRT{}
		rt.ok.Store(true)
		adm := newFakeAdmission(4, "pod")
		u, _ := url.Parse("http://pod.invalid:8000")
		h, err := newHandler(testOptions{
			Upstreams:    []pods.Pod{{Name: "pod", URL: u}},
			Admission:    adm,
			RoundTripper: rt,
		})
		if err != nil {
			t.Fatal(err)
		}
		hc := &healthcheck.Checker{Registry: h.reg, Transport: rt, Dispatch: h.core.Dispatch,
			Settings: healthcheck.Settings{Interval: 5 * time.Second, Timeout: time.Second, UnhealthyAfter: 2, HealthyAfter: 1}}
		go func() { _ = hc.Run(t.Context()) }()
		steps := []struct {
			ok        bool
			wait      time.Duration
			wantAvail bool
			wantReady bool
		}{
			{ok: true, wait: time.Second, wantAvail: true, wantReady: true},
			{ok: false, wait: 5 * time.Second, wantAvail: true, wantReady: true}, // one failure: not yet
			{ok: false, wait: 5 * time.Second, wantAvail: false, wantReady: false},
			{ok: true, wait: 5 * time.Second, wantAvail: true, wantReady: true}, // one success heals
		}
		for i, s := range steps {
			rt.ok.Store(s.ok)
			time.Sleep(s.wait)
			synctest.Wait()
			if got := h.reg.Availability("pod") == queue.Available; got != s.wantAvail {
				t.Errorf("step %d: available = %v, want %v", i, got, s.wantAvail)
			}
			if got := h.Ready(); got != s.wantReady {
				t.Errorf("step %d: Ready() = %v, want %v", i, got, s.wantReady)
			}
		}
		if rt.calls.Load() < 4 {
			t.Errorf("health probes = %d, want one per interval", rt.calls.Load())
		}
	})
}
