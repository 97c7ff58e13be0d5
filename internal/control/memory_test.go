package control

import (
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// TestMemoryBudgetAndTokenLimit: the memory budget follows the free memory
// the pod reports (× memory_share ÷ vocab_size); the token limit follows the
// request window through a cut; both are 0 (no bound) while off.
func TestMemoryBudgetAndTokenLimit(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte(`
upstreams:
  - {name: a, url: "http://127.0.0.1:1", max_inflight: 100, min_inflight: 4, vocab_size: 1000, max_inflight_tokens: 50000}
  - {name: b, url: "http://127.0.0.1:2", max_inflight: 10, min_inflight: 2}
batch: {memory_share: 0.5}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := New(FromPolicy(c))
	if err != nil {
		t.Fatal(err)
	}
	free := func(bytes float64) pressure.State {
		return round(map[string]map[pressure.Signal]pressure.Value{
			"a": {pressure.FreeMemory: val(bytes, "a/alloc", false), pressure.KVCacheUsage: val(0.5, "a/vllm", false)},
			"b": {pressure.FreeMemory: val(bytes, "b/alloc", false)},
		})
	}
	steps := []struct {
		state          pressure.State
		budget, tokens int64 // a's
		budgetChanged  bool
	}{
		{free(8e6), 4000, 50000, true},  // 8 MB × 0.5 ÷ 1000
		{free(8e6), 4000, 50000, false}, // unchanged
		{free(0), 1, 50000, true},       // nothing free: nothing new starts
		{round(nil), 0, 50000, true},    // no reading: no bound
		{func() pressure.State { // KV cache full: degraded, window 100 → 80
			st := free(8e6)
			st.Upstreams[0].Signals[pressure.KVCacheUsage] = val(0.99, "a/vllm", false)
			return st
		}(), 4000, 40000, true},
	}
	for i, st := range steps {
		d := ctl.ObserveAt(t0, st.state, true)
		a, b := d.Upstreams[0], d.Upstreams[1]
		if a.MemoryBudget != st.budget || a.TokenLimit != st.tokens || a.MemoryBudgetChanged != st.budgetChanged {
			t.Fatalf("step %d: a budget %d (changed %v) tokens %d, want %d (%v) and %d",
				i, a.MemoryBudget, a.MemoryBudgetChanged, a.TokenLimit, st.budget, st.budgetChanged, st.tokens)
		}
		if b.MemoryBudget != 0 || b.TokenLimit != 0 {
			t.Fatalf("step %d: b (vocab_size and max_inflight_tokens 0) budget %d tokens %d, want 0 and 0", i, b.MemoryBudget, b.TokenLimit)
		}
	}
}
