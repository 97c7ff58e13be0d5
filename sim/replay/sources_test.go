package replay

import (
	"slices"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// The replay's gatekeeper reads only the sources its policy lists, as
// gatekeeper does: the default policy reads a plain vLLM's /metrics and
// nothing of the allocator, so no fragmentation, allocator retries or free
// memory reach its controller.
func TestSourcesFollowThePolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		sources []pressure.Kind
		want    []pressure.Signal // present in every round
		absent  []pressure.Signal
	}{
		{"default: vllm only", nil,
			[]pressure.Signal{pressure.KVCacheUsage, pressure.Waiting},
			[]pressure.Signal{pressure.Fragmentation, pressure.AllocRetryRate, pressure.FreeMemory, pressure.MemoryUsed}},
		{"the allocator exporter", []pressure.Kind{pressure.KindVLLM, pressure.KindMemoryBlocks},
			[]pressure.Signal{pressure.KVCacheUsage, pressure.Fragmentation, pressure.FreeMemory},
			[]pressure.Signal{}},
		{"nvml on the node", []pressure.Kind{pressure.KindNVML},
			[]pressure.Signal{pressure.MemoryUsed},
			[]pressure.Signal{pressure.KVCacheUsage, pressure.Fragmentation}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rounds := 0
			_, err := Run(Settings{Engine: sim.Settings{GPU: h100()}, Policy: Gatekeeper, Sources: tc.sources,
				Trace: TraceSettings{Duration: 5 * time.Second, Seed: 1},
				Observer: func(r Round) {
					rounds++
					us, _ := r.State.Upstream(upstream)
					for _, s := range tc.want {
						if _, ok := us.Signals[s]; !ok {
							t.Errorf("round %d: signal %s absent, want it from %v", rounds, s, tc.sources)
						}
					}
					for _, s := range tc.absent {
						if _, ok := us.Signals[s]; ok {
							t.Errorf("round %d: signal %s present, want none from %v", rounds, s, tc.sources)
						}
					}
				}})
			if err != nil || rounds == 0 {
				t.Fatalf("Run = %v after %d rounds", err, rounds)
			}
		})
	}
	if got := PolicySources(config.Default()); !slices.Equal(got, []pressure.Kind{pressure.KindVLLM}) {
		t.Errorf("PolicySources(config.Default()) = %v, want [vllm]", got)
	}
}
