package replay

import (
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// nSource sends one request every 20 ms, each asking for n sequences.
type nSource struct {
	n, left int
	at      time.Duration
}

func (s *nSource) Err() error        { return nil }
func (s *nSource) Classes() []string { return []string{"short"} }
func (s *nSource) Next() (Arrival, bool) {
	if s.left == 0 {
		return Arrival{}, false
	}
	s.left--
	s.at += 20 * time.Millisecond
	return Arrival{At: s.at, Prompt: 100, Output: 200, MaxToken: 256, N: s.n}, true
}

// TestNSequences: a request with n runs n sequences on the engine and is
// served once, with all their tokens, when the last ends; behind gatekeeper
// it takes n slots of the window, so the pod never runs more sequences
// than the window.
func TestNSequences(t *testing.T) {
	for _, p := range []Policy{None, Gatekeeper} {
		t.Run(p.String(), func(t *testing.T) {
			s := Settings{
				Engine: sim.Settings{GPU: h100()}, Trace: TraceSettings{Duration: 10 * time.Minute}, MaxWait: 5 * time.Minute,
				TTFTDeadline: -1, // every request waits its turn
				Source:       &nSource{n: 4, left: 100}, Policy: p, LimiterOff: true,
				Clients:     map[string]Client{}, // every client waits its answer
				Slow:        breaker.SlowSettings{Window: breaker.WindowSettings{MaxInflight: 8, MinInflight: 4}},
				SeriesEvery: 500 * time.Millisecond,
			}
			res, err := Run(s)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcomes.Served != 100 || res.GeneratedTokens != 100*4*200 {
				t.Fatalf("served %d, %d tokens; want 100 requests of 4 × 200 tokens (%+v)", res.Outcomes.Served, res.GeneratedTokens, res.Outcomes)
			}
			peak := 0
			for _, sm := range res.Series {
				peak = max(peak, sm.Running+sm.Waiting)
			}
			switch {
			case p == Gatekeeper && peak > 8:
				t.Errorf("the pod held %d sequences behind a window of 8", peak)
			case p == None && peak <= 8:
				t.Errorf("unprotected, the pod held at most %d sequences: the test's load does not exceed the window", peak)
			}
		})
	}
}

// TestTraceN: NFraction picks that share of requests for N sequences; at 0
// none (and nothing more is drawn: the replay's pinned figures hold that).
func TestTraceN(t *testing.T) {
	count := func(ts TraceSettings) (n, total int) {
		tr, err := NewTrace(ts)
		if err != nil {
			t.Fatal(err)
		}
		for a, ok := tr.Next(); ok; a, ok = tr.Next() {
			total++
			if a.N > 1 {
				if a.N != ts.N {
					t.Fatalf("arrival with n %d, want %d", a.N, ts.N)
				}
				n++
			}
		}
		return n, total
	}
	if n, _ := count(TraceSettings{Duration: 10 * time.Minute, Seed: 3}); n != 0 {
		t.Fatalf("NFraction 0: %d arrivals with n", n)
	}
	n, total := count(TraceSettings{Duration: 10 * time.Minute, Seed: 3, NFraction: 0.1, N: 4})
	if f := float64(n) / float64(total); f < 0.08 || f > 0.12 {
		t.Errorf("NFraction 0.1 gave %.3f of %d arrivals with n", f, total)
	}
	if _, err := NewTrace(TraceSettings{NFraction: 0.5, N: 2000}); err == nil {
		t.Error("NewTrace(N 2000) = nil error")
	}
}

// TestNSequencesOOM: when the engine dies under requests with n, each
// request fails once, however many of its sequences were running, and
// every arrival still has exactly one outcome.
func TestNSequencesOOM(t *testing.T) {
	for _, pol := range []Policy{None, Gatekeeper} {
		t.Run(pol.String(), func(t *testing.T) {
			s := ooming(pol, 10*time.Minute, 1)
			s.Trace.NFraction, s.Trace.N = 0.5, 4
			r, err := Run(s)
			if err != nil {
				t.Fatal(err)
			}
			o := r.Outcomes
			t.Logf("OOMs %d, %d arrivals: %+v", r.OOMs, r.Arrivals, o)
			checkOutcomes(t, r)
			if pol == None && (r.OOMs == 0 || o.UpstreamError == 0) {
				t.Fatalf("OOMs %d, failed %d: want the unprotected engine to die and fail requests", r.OOMs, o.UpstreamError)
			}
		})
	}
}
