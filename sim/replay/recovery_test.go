package replay

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// TestRecoveryLatency: requests that arrive while gatekeeper's window is
// degraded or recovering get their own p99; other policies have none.
func TestRecoveryLatency(t *testing.T) {
	t.Parallel()
	var results []Result
	for _, p := range []Policy{None, Gatekeeper} {
		// 90 QPS overloads the pod (≈ 67/s): its KV cache fills and the
		// default kv_cache_usage rule degrades it; what is tested is the
		// recovery figures, not the rule.
		r, err := Run(Settings{Engine: sim.Settings{GPU: h100()}, Trace: TraceSettings{Duration: 3 * time.Minute, BaseQPS: 90, BurstQPS: 90, Seed: 1},
			Policy: p})
		if err != nil {
			t.Fatal(err)
		}
		var rec int64
		for _, c := range r.Classes {
			rec += c.RecoveryServed
			if c.RecoveryServed > 0 && c.RecoveryP99 <= 0 {
				t.Errorf("%s %s: %d recovery requests served with p99 %v", p, c.Name, c.RecoveryServed, c.RecoveryP99)
			}
		}
		switch {
		case p == None && rec != 0:
			t.Errorf("unprotected: %d recovery requests, want 0 (no window)", rec)
		case p == Gatekeeper && (rec == 0 || rec > r.Outcomes.Served || r.LevelTime[1] == 0):
			// 90 QPS overloads the engine (≈ 67/s): the rule cuts the
			// window, which ramps back after.
			t.Errorf("gatekeeper: %d recovery requests of %d served, degraded for %v", rec, r.Outcomes.Served, r.LevelTime[1])
		}
		results = append(results, r)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, results); err != nil || !strings.Contains(b.String(), "p99 short, recovery (served)") {
		t.Fatalf("WriteTable = %v:\n%s", err, b.String())
	}
}

// TestLimiterOff: the policy file's qps: 0 lets every arrival through the
// fast breaker.
func TestLimiterOff(t *testing.T) {
	t.Parallel()
	s := Settings{Engine: sim.Settings{GPU: h100()}, Policy: QPSOnly,
		Trace: TraceSettings{Duration: time.Minute, BaseQPS: 200, BurstQPS: 200, Seed: 2}}
	on, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	s.LimiterOff = true
	off, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	if on.Outcomes.RateLimited == 0 || off.Outcomes.RateLimited != 0 {
		t.Fatalf("429s with the limiter %d, without %d; want some, then none", on.Outcomes.RateLimited, off.Outcomes.RateLimited)
	}
}
