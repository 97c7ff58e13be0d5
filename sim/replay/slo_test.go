package replay

import (
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// TestSLOGoodput: the tokens of requests that met their deadlines, within
// the raw goodput; every token with deadlines nobody misses, none with
// deadlines nobody meets; overload (90 QPS against ≈ 67/s) misses some.
func TestSLOGoodput(t *testing.T) {
	t.Parallel()
	run := func(slo SLO) Result {
		t.Helper()
		r, err := Run(Settings{Engine: sim.Settings{GPU: h100()}, Policy: None, SLO: slo,
			Trace: TraceSettings{Duration: 3 * time.Minute, BaseQPS: 90, BurstQPS: 90, Seed: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	def := run(SLO{})
	if def.SLOTokens <= 0 || def.SLOTokens >= def.GeneratedTokens {
		t.Errorf("default SLO: %d of %d tokens met it, want some but not all under overload", def.SLOTokens, def.GeneratedTokens)
	}
	if r := run(SLO{TTFT: map[string]time.Duration{}, DefaultTTFT: time.Hour, TPOT: time.Hour}); r.SLOTokens != r.GeneratedTokens {
		t.Errorf("deadlines of an hour: %d of %d tokens, want all", r.SLOTokens, r.GeneratedTokens)
	}
	if r := run(SLO{TTFT: map[string]time.Duration{}, DefaultTTFT: time.Nanosecond, TPOT: time.Nanosecond}); r.SLOTokens != 0 {
		t.Errorf("deadlines of a nanosecond: %d tokens, want none", r.SLOTokens)
	}
	rec := def.Record()
	if rec.SLOGoodputTokensPerS != def.SLOGoodput() || rec.P99ShortS <= 0 || rec.Policy != "unprotected" || rec.GPUMemoryUtilization != 0.9 {
		t.Errorf("Record() = %+v", rec)
	}
}
