package sim

import (
	"strings"
	"testing"
	"time"
)

// TestTensorParallelPlan: Llama-3-70B over 4 H100s: each GPU holds a quarter
// of the weights (70 553 706 496 × 2 B ÷ 4) and of the KV heads
// (2 × 80 layers × 8 heads × 128 × 2 B ÷ 4 per token), and a decode step of
// one sequence takes its weights' read time plus two all-reduces per layer.
func TestTensorParallelPlan(t *testing.T) {
	g, _ := GPUByName("H100-80G")
	m, err := ModelByName("meta-llama/Meta-Llama-3-70B")
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, Settings{GPU: g, Model: m, TensorParallel: 4})
	p := e.Plan()
	if p.WeightBytes != 35_276_853_248 || p.KVBytesPerToken != 81_920 {
		t.Fatalf("plan %+v: want weights 35 276 853 248 B and 81 920 KV bytes per token per GPU", p)
	}
	kv := int64(float64(g.MemoryBytes)*0.9) - p.WeightBytes - p.ActivationPeakBytes - p.NonTorchBytes - p.CUDAGraphBytes
	if want := int(kv / (16 * 81_920)); p.NumGPUBlocks != want {
		t.Fatalf("NumGPUBlocks = %d, want %d", p.NumGPUBlocks, want)
	}
	s, err := e.Submit(Request{PromptTokens: 100, MaxTokens: 101})
	if err != nil {
		t.Fatal(err)
	}
	e.Advance(time.Minute)
	perToken := float64(s.FinishedAt()-s.FirstTokenAt()) / 100 / float64(time.Second)
	weights := float64(p.WeightBytes) / g.BandwidthBytesPerSec
	comm := 2 * 80 * (8192 * 2 * 2 * 3.0 / 4) / g.LinkBytesPerSec // one token's hidden state, ring all-reduce
	if perToken < weights+comm || perToken > (weights+comm)*1.02 {
		t.Fatalf("decode %.3f ms per token, want weights %.3f ms + all-reduces %.4f ms (+ KV reads, < 2 %%)",
			perToken*1e3, weights*1e3, comm*1e3)
	}
	one := newEngine(t, Settings{GPU: g, Model: m, TensorParallel: 8})
	if one.Plan().WeightBytes*2 != p.WeightBytes || one.Plan().NumGPUBlocks <= p.NumGPUBlocks {
		t.Fatalf("TP 8 plan %+v: want half the weights and more KV blocks than TP 4", one.Plan())
	}
}

func TestTensorParallelInvalid(t *testing.T) {
	g, _ := GPUByName("H100-80G")
	m, _ := ModelByName("meta-llama/Meta-Llama-3-70B")
	for _, tp := range []int{-1, 3} {
		_, err := New(Settings{GPU: g, Model: m, TensorParallel: tp})
		if err == nil || !strings.Contains(err.Error(), "TensorParallel") {
			t.Errorf("New(TensorParallel %d) = %v, want an error naming it", tp, err)
		}
	}
	g.LinkBytesPerSec = 0
	if _, err := New(Settings{GPU: g, Model: m, TensorParallel: 2}); err == nil || !strings.Contains(err.Error(), "LinkBytesPerSec") {
		t.Errorf("New(no link, TP 2) = %v, want an error naming LinkBytesPerSec", err)
	}
}
