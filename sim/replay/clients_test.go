package replay

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// TestRetryDelay is the OpenAI SDK's timing: Retry-After as sent when in
// (0, 120 s], else 0.5 s × 2ⁿ capped at 8 s, shortened by up to a quarter.
func TestRetryDelay(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		n          int
		retryAfter time.Duration
		lo, hi     time.Duration
	}{
		{0, 0, 375 * time.Millisecond, 500 * time.Millisecond},
		{1, 0, 750 * time.Millisecond, time.Second},
		{6, 0, 6 * time.Second, 8 * time.Second},
		{0, 2 * time.Second, 2 * time.Second, 2 * time.Second},
		{1, 120 * time.Second, 120 * time.Second, 120 * time.Second},
		{0, 121 * time.Second, 375 * time.Millisecond, 500 * time.Millisecond}, // not honoured (and not retried: retryOrGiveUp)
	} {
		for range 50 {
			if d := retryDelay(tc.n, tc.retryAfter, rng); d < tc.lo || d > tc.hi {
				t.Fatalf("retryDelay(%d, %v) = %v, want in [%v, %v]", tc.n, tc.retryAfter, d, tc.lo, tc.hi)
			}
		}
	}
	if got := retryAfterHeader(1500 * time.Millisecond); got != 2*time.Second {
		t.Errorf("retryAfterHeader(1.5 s) = %v, want 2 s (whole seconds, rounded up)", got)
	}
	if got := retryAfterHeader(0); got != time.Second {
		t.Errorf("retryAfterHeader(0) = %v, want 1 s", got)
	}
}

// burstSource sends n requests of one class at once.
type burstSource struct {
	n     int
	class string
	req   Arrival
}

func (s *burstSource) Err() error        { return nil }
func (s *burstSource) Classes() []string { return []string{s.class} }
func (s *burstSource) Next() (Arrival, bool) {
	if s.n == 0 {
		return Arrival{}, false
	}
	s.n--
	a := s.req
	a.At = time.Millisecond
	return a, true
}

// TestClientsRetryAndGiveUp: refused attempts are retried as the SDK does
// (two retries, the Retry-After honoured); a user who sees no first token
// within Patience gives up, which aborts the request at the pod; every
// attempt and every request has one outcome.
func TestClientsRetryAndGiveUp(t *testing.T) {
	t.Parallel()
	// A limiter of one request a second with a burst of one: of 10 sent at
	// once, 1 passes and 9 get 429 with Retry-After 1 s, then 2 s…
	s := Settings{Engine: sim.Settings{GPU: h100()}, Policy: QPSOnly, Trace: TraceSettings{Duration: time.Minute},
		Limiter: breaker.LimiterSettings{QPS: 1, Burst: 1},
		Source:  &burstSource{n: 10, class: "doc", req: Arrival{Prompt: 100, Output: 10, MaxToken: 10}},
		Clients: map[string]Client{"doc": SDKClient()}}
	r, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	checkOutcomes(t, r)
	if r.Arrivals != 10 || r.Attempts <= 10 || r.Attempts > 30 || r.Outcomes.RateLimited == 0 || r.Requests.Refused == 0 {
		t.Fatalf("arrivals %d, attempts %d, 429s %d, requests %+v: want retries, at most two each, and some refused for good",
			r.Arrivals, r.Attempts, r.Outcomes.RateLimited, r.Requests)
	}
	// Patient clients send each request once.
	s.Source = &burstSource{n: 10, class: "doc", req: Arrival{Prompt: 100, Output: 10, MaxToken: 10}}
	s.Clients = map[string]Client{}
	if p, _ := Run(s); p.Attempts != 10 || p.Requests.Refused != 9 {
		t.Fatalf("patient: attempts %d, requests %+v; want 10 and 9 refused", p.Attempts, p.Requests)
	}

	// One sequence at a time on the pod, each running 60 s: the users who
	// queue behind the first give up after 5 s; their requests are aborted
	// in vLLM's queue.
	slow := Settings{Engine: sim.Settings{GPU: h100(), MaxNumSeqs: 1}, Trace: TraceSettings{Duration: time.Minute},
		Source:  &burstSource{n: 5, class: "chat", req: Arrival{Prompt: 100, Output: 5000, MaxToken: 5000}},
		Clients: map[string]Client{"chat": {Patience: 5 * time.Second, Retries: 2, Stream: true}}}
	g, err := Run(slow)
	if err != nil {
		t.Fatal(err)
	}
	checkOutcomes(t, g)
	if g.Requests.Abandoned != 4 || g.Outcomes.ClientClosed != 4 || g.Attempts != 5 {
		t.Fatalf("requests %+v, outcomes %+v, attempts %d: want 4 given up and closed, no retry", g.Requests, g.Outcomes, g.Attempts)
	}
}
