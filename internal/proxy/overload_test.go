package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeOverload admits while room is true and counts the requests done.
type fakeOverload struct {
	room bool
	done atomic.Int32
}

func (o *fakeOverload) Admit() bool { return o.room }
func (o *fakeOverload) Done()       { o.done.Add(1) }

// roundTripFunc adapts a function to http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// readCounter is a request body that counts the bytes read from it.
type readCounter struct {
	r io.Reader
	n atomic.Int64
}

func (c *readCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// TestOverloadRefusesBeforeTheBody: while gatekeeper is saturated a request
// is refused with 503, Retry-After and reason gateway_overloaded, counted
// as overloaded, without a byte of its body read and without reaching a
// pod; with room it is served and reported done once.
func TestOverloadRefusesBeforeTheBody(t *testing.T) {
	for _, tt := range []struct {
		name       string
		room       bool
		status     int
		reason     string
		retryAfter string
		outcome    decide.Outcome
		podCalls   int32
		done       int32
	}{
		{"saturated", false, 503, "gateway_overloaded", "2", decide.OutcomeOverloaded, 0, 0},
		{"room", true, 200, "", "", decide.OutcomeServed, 1, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var podCalls atomic.Int32
			rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				podCalls.Add(1)
				return staticTransport{}.RoundTrip(r)
			})
			ov := &fakeOverload{room: tt.room}
			u, _ := url.Parse("http://pod.invalid:8000")
			m := NewMetrics(prometheus.NewRegistry())
			h, err := newHandler(testOptions{
				Upstreams: []pods.Pod{{Name: "pod", URL: u}}, Admission: newFakeAdmission(4, "pod"),
				RoundTripper: rt, Metrics: m, Policy: decide.Policy{RetryAfter: 2 * time.Second},
				Extra: func(o *Options) { o.Overload = ov },
			})
			if err != nil {
				t.Fatal(err)
			}
			body := &readCounter{r: strings.NewReader(`{"model":"m","prompt":"hi"}`)}
			req := httptest.NewRequest(http.MethodPost, "/v1/completions", body)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			res := rec.Result()
			if res.StatusCode != tt.status || res.Header.Get("X-Gatekeeper-Reason") != tt.reason ||
				res.Header.Get("Retry-After") != tt.retryAfter {
				t.Errorf("answer = %d, reason %q, Retry-After %q; want %d, %q, %q", res.StatusCode,
					res.Header.Get("X-Gatekeeper-Reason"), res.Header.Get("Retry-After"), tt.status, tt.reason, tt.retryAfter)
			}
			if !tt.room && body.n.Load() != 0 {
				t.Errorf("body bytes read before the refusal = %d, want 0", body.n.Load())
			}
			if got := testutil.ToFloat64(m.requests.WithLabelValues(string(tt.outcome))); got != 1 {
				t.Errorf("outcome %s counted %v times, want 1", tt.outcome, got)
			}
			if podCalls.Load() != tt.podCalls || ov.done.Load() != tt.done {
				t.Errorf("pod calls %d, done %d; want %d, %d", podCalls.Load(), ov.done.Load(), tt.podCalls, tt.done)
			}
		})
	}
}
