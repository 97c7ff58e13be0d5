package replay

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim"
)

func TestTraceRatesAndMix(t *testing.T) {
	tr, err := NewTrace(TraceSettings{Duration: time.Hour, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	var n, burst, long int
	last := time.Duration(-1)
	for {
		a, ok := tr.Next()
		if !ok {
			break
		}
		if a.At <= last {
			t.Fatalf("arrival at %v after %v: not in time order", a.At, last)
		}
		last = a.At
		n++
		if tr.InBurst(a.At) {
			burst++
		}
		if a.Class == 1 {
			long++
		}
	}
	// 25 min at 50 QPS and 5 min at 80 QPS per half hour: 198 000 per hour.
	if n < 196000 || n > 200000 || burst < 47000 || burst > 49000 {
		t.Fatalf("arrivals = %d (%d in bursts), want ≈ 198 000 (48 000)", n, burst)
	}
	if f := float64(long) / float64(n); f < 0.14 || f > 0.16 {
		t.Fatalf("long fraction = %.3f, want ≈ 0.15", f)
	}
}

func TestTraceSettingsErrors(t *testing.T) {
	for _, s := range []TraceSettings{
		{BurstLength: time.Hour},
		{Classes: []Class{{Name: "x", Weight: 1, Prompt: Range{Min: 0, Max: 1}, Output: Range{Min: 1, Max: 1}, MaxTokens: 1}}},
		{Classes: []Class{{Name: "x", Weight: 1, Prompt: Range{Min: 1, Max: 1}, Output: Range{Min: 1, Max: 10}, MaxTokens: 5}}},
		{TopPFraction: 2},
	} {
		if _, err := NewTrace(s); err == nil {
			t.Fatalf("NewTrace(%+v) = nil error", s)
		}
	}
}

func h100() sim.GPU {
	g, _ := sim.GPUByName("H100-80G")
	return g
}

// ooming is a run that OOMs an unprotected pod within minutes: the
// prompt-logprobs scenario (logits over every prompt token of a scoring
// request, which vLLM's profile never runs) on an H100 at 0.95.
func ooming(p Policy, d time.Duration, seed uint64) Settings {
	sc, _ := ScenarioByName("prompt-logprobs")
	return sc.Apply(Settings{Engine: sim.Settings{GPU: h100(), GPUMemoryUtilization: 0.95}, Policy: p,
		Trace: TraceSettings{Duration: d, Seed: seed}})
}

// TestEveryArrivalHasOneOutcome runs each policy briefly and checks that the
// outcomes add up, the attempts' to the attempts and the requests' to the
// arrivals, and that two runs with the same seed agree.
func TestEveryArrivalHasOneOutcome(t *testing.T) {
	for _, p := range Policies() {
		t.Run(p.String(), func(t *testing.T) {
			s := Settings{Engine: sim.Settings{GPU: h100()}, Trace: TraceSettings{Duration: 3 * time.Minute, Seed: 1}, Policy: p}
			r1, err := Run(s)
			if err != nil {
				t.Fatal(err)
			}
			r2, _ := Run(s)
			r1.Wall, r2.Wall = 0, 0
			if r1.Policy != r2.Policy || r1.Outcomes != r2.Outcomes || r1.GeneratedTokens != r2.GeneratedTokens ||
				r1.Classes[0] != r2.Classes[0] || r1.EffectiveUtilization != r2.EffectiveUtilization {
				t.Fatalf("same seed, different results:\n%+v\n%+v", r1, r2)
			}
			checkOutcomes(t, r1)
			if r1.Outcomes.Served == 0 || r1.Requests != r2.Requests {
				t.Fatalf("served %d; requests %+v and %+v", r1.Outcomes.Served, r1.Requests, r2.Requests)
			}
		})
	}
}

// checkOutcomes: every attempt has one outcome, every request one too.
func checkOutcomes(t *testing.T, r Result) {
	t.Helper()
	o := r.Outcomes
	sum := o.Served + o.UpstreamError + o.RateLimited + o.Overloaded + o.QueueFull + o.QueueTimeout + o.Deadline + o.ClientClosed + o.Unfinished
	if sum != r.Attempts || r.Attempts < r.Arrivals {
		t.Fatalf("outcomes %+v add up to %d, want %d attempts (%d arrivals)", o, sum, r.Attempts, r.Arrivals)
	}
	q := r.Requests
	if q.ended()+q.Unfinished != r.Arrivals || q.Met+q.Late != o.Served {
		t.Fatalf("requests %+v: want %d arrivals, %d served", q, r.Arrivals, o.Served)
	}
	var arrivals, met int64
	for _, c := range r.Classes {
		arrivals, met = arrivals+c.Arrivals, met+c.Met
	}
	if arrivals != r.Arrivals || met != q.Met {
		t.Fatalf("classes count %d arrivals and %d met, want %d and %d", arrivals, met, r.Arrivals, q.Met)
	}
}

// TestOOMsCountDowntimeAndFailures: an unprotected pod OOMs on work its
// profile never ran; it fails its in-flight requests and is down for its
// restart time.
func TestOOMsCountDowntimeAndFailures(t *testing.T) {
	r, err := Run(ooming(None, 10*time.Minute, 1))
	if err != nil {
		t.Fatal(err)
	}
	checkOutcomes(t, r)
	if r.OOMs == 0 || r.Downtime < 90*time.Second || r.Outcomes.UpstreamError == 0 || r.Requests.Failed == 0 {
		t.Fatalf("OOMs %d, downtime %v, failed %d: want OOMs with their downtime and failures", r.OOMs, r.Downtime, r.Outcomes.UpstreamError)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, []Result{r}); err != nil || !strings.Contains(b.String(), "OOM events") {
		t.Fatalf("WriteTable = %v:\n%s", err, b.String())
	}
}

// BenchmarkRun reports virtual seconds replayed per real second, unprotected
// and with gatekeeper, on the default trace.
func BenchmarkRun(b *testing.B) {
	for _, p := range []Policy{None, Gatekeeper} {
		b.Run(p.String(), func(b *testing.B) {
			b.ReportAllocs()
			var virt time.Duration
			for b.Loop() {
				if _, err := Run(Settings{Engine: sim.Settings{GPU: h100()}, Trace: TraceSettings{Duration: 10 * time.Minute}, Policy: p}); err != nil {
					b.Fatal(err)
				}
				virt += 10 * time.Minute
			}
			b.ReportMetric(virt.Seconds()/b.Elapsed().Seconds(), "vsec/s")
		})
	}
}
