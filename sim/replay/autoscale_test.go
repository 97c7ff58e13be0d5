package replay

import (
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/scale"
	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// TestAutoscale: on chat's bursts (every 10 minutes here), a pool that starts with one pod and is
// sized by gatekeeper's estimator or by KV usage adds pods after their start
// delay, pays for them in GPU time and drains them after the burst; a static pool pays pods × horizon;
// every outcome is counted, and two runs agree.
func TestAutoscale(t *testing.T) {
	t.Parallel()
	const d = 20 * time.Minute
	shrank := map[Scaling]bool{}
	run := func(m Scaling) Result {
		s := Settings{Engine: sim.Settings{GPU: h100()}, Policy: Gatekeeper,
			Trace:     TraceSettings{Duration: d, Seed: 1, BurstEvery: 10 * time.Minute, BurstLength: 4 * time.Minute},
			Autoscale: AutoscaleSettings{Mode: m, Scale: scale.Settings{MaxReplicas: 3, Stabilization: 2 * time.Minute}, StartDelay: time.Minute}}
		pods := 0
		s.Observer = func(rd Round) {
			n := len(rd.Decision.Upstreams)
			shrank[m] = shrank[m] || n < pods
			pods = n
		}
		r, err := Run(s)
		if err != nil {
			t.Fatal(err)
		}
		checkOutcomes(t, r)
		return r
	}
	static, gk, kv := run(StaticPool), run(ScaleGatekeeper), run(ScaleKVUsage)
	if static.Pool.GPUTime != d || static.Pool.PeakPods != 1 {
		t.Fatalf("static: GPU time %v, %d pods at most; want %v, 1", static.Pool.GPUTime, static.Pool.PeakPods, d)
	}
	for _, r := range []Result{gk, kv} {
		if r.Pool.PeakPods < 2 || r.Pool.PeakPods > 3 || r.Pool.GPUTime <= d || r.Pool.GPUTime > 3*d {
			t.Fatalf("%s: %d pods at most, GPU time %v; want 2–3 pods, between %v and %v", r.Pool.Scaling, r.Pool.PeakPods,
				r.Pool.GPUTime, d, 3*d)
		}
		if !shrank[r.Pool.Scaling] {
			t.Fatalf("%s: the pool never shrank after a burst", r.Pool.Scaling)
		}
		if r.Arrivals != static.Arrivals {
			t.Fatalf("%s: %d arrivals, static %d", r.Pool.Scaling, r.Arrivals, static.Arrivals)
		}
	}
	if gk.SLOAttainment() <= static.SLOAttainment() {
		t.Fatalf("SLO attainment: gatekeeper scaling %.3f, static one pod %.3f; want more pods to help",
			gk.SLOAttainment(), static.SLOAttainment())
	}
	if again := run(ScaleGatekeeper); again.Pool.GPUTime != gk.Pool.GPUTime || again.Outcomes != gk.Outcomes {
		t.Fatal("the same seed scaled differently")
	}
}
