package sim

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"testing"
	"time"
)

func newEngine(t testing.TB, s Settings) *Engine {
	t.Helper()
	e, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestPlanLlama3OnA100(t *testing.T) {
	e := newEngine(t, Settings{})
	p := e.Plan()
	if p.KVBytesPerToken != 131072 {
		t.Fatalf("KVBytesPerToken = %d, want 131072 (SIM-FACTS)", p.KVBytesPerToken)
	}
	// 80 GiB × 0.9 − weights − peak − 1 GiB, in blocks of 16 × 131072 bytes.
	want := (int64(float64(80*gib)*0.9) - 16_060_522_496 - p.ActivationPeakBytes - gib) / (16 * 131072)
	if int64(p.NumGPUBlocks) != want {
		t.Fatalf("NumGPUBlocks = %d, want %d", p.NumGPUBlocks, want)
	}
	m := e.Metrics()
	if m.Device.UsedBytes+m.Device.FreeBytes != 80*gib || m.Allocator.ReservedBytes < p.WeightBytes+p.KVCacheBytes {
		t.Fatalf("device %+v, reserved %d: weights and KV cache must be held", m.Device, m.Allocator.ReservedBytes)
	}
	m13, err := ModelByName("llama-2-13b")
	if err != nil || m13.KVBytesPerToken() != 819200 {
		t.Fatalf("Llama-2-13B KVBytesPerToken = %d, %v, want 819200", m13.KVBytesPerToken(), err)
	}
}

func TestSettingsErrors(t *testing.T) {
	tests := []struct {
		name string
		s    Settings
	}{
		{"utilization above 1", Settings{GPUMemoryUtilization: 1.2}},
		{"negative seqs", Settings{MaxNumSeqs: -1}},
		{"no room for KV", Settings{GPUMemoryUtilization: 0.1}},
		{"other processes eat the activations", Settings{OtherProcessBytes: 20 * gib}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.s); err == nil {
				t.Fatalf("New(%+v) = nil error", tt.s)
			}
		})
	}
}

// TestRoofline checks one decode step against the hand computation:
// (weights + KV bytes of the context) ÷ bandwidth.
func TestRoofline(t *testing.T) {
	e := newEngine(t, Settings{})
	s, err := e.Submit(Request{PromptTokens: 1000, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	e.Advance(time.Hour)
	if s.State() != SeqFinished {
		t.Fatalf("state = %v, want finished", s.State())
	}
	// prefill 1000 tokens: compute-bound, 2 × params × 1000 ÷ (312e12 × 0.5).
	prefill := 2 * 8_030_261_248.0 * 1000 / (312e12 * 0.5)
	// decode of token 1001: (weights + 1001 × 131072) ÷ 2.04e12.
	decode := (16_060_522_496 + 1001*131072.0) / 2.04e12
	want := time.Duration(prefill*1e9) + time.Duration(decode*1e9)
	if got := s.FinishedAt(); got != want {
		t.Fatalf("FinishedAt = %v, want %v", got, want)
	}
	if got := time.Duration(prefill * 1e9); s.FirstTokenAt() != got {
		t.Fatalf("FirstTokenAt = %v, want %v", s.FirstTokenAt(), got)
	}
}

func TestPreemptionWhenKVRunsOut(t *testing.T) {
	// 10 blocks of 16 tokens; three requests that each grow to 80 tokens (5 blocks).
	e := newEngine(t, Settings{NumGPUBlocksOverride: 10})
	var seqs []*Seq
	for range 3 {
		s, err := e.Submit(Request{PromptTokens: 40, MaxTokens: 40})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s)
	}
	e.Advance(time.Hour)
	m := e.Metrics()
	if m.Counters.Preemptions == 0 {
		t.Fatal("Preemptions = 0, want > 0 with a KV cache too small for the batch")
	}
	for i, s := range seqs {
		if s.State() != SeqFinished || s.Generated() != 40 {
			t.Fatalf("seq %d: state %v generated %d, want finished with 40", i, s.State(), s.Generated())
		}
	}
	if m.KVCacheUsage != 0 || m.Running != 0 || m.Counters.GenerationTokens != 120 || m.Counters.PromptTokens != 120 {
		t.Fatalf("after the run: %+v", m)
	}
	if _, err := e.Submit(Request{PromptTokens: 100, MaxTokens: 100}); !errors.Is(err, ErrTooLong) {
		t.Fatalf("Submit(needs 13 blocks of 10) = %v, want ErrTooLong", err)
	}
}

func TestOOMKillsInFlightAndRestarts(t *testing.T) {
	base := newEngine(t, Settings{}).Plan()
	// Other processes leave the allocator exactly the profiled peak: top-p
	// sampling (not in the profile) over a big batch cannot fit.
	s := Settings{OtherProcessBytes: base.ActivationBudgetBytes - base.ActivationPeakBytes}
	e := newEngine(t, s)
	var seqs []*Seq
	for range 200 {
		sq, err := e.Submit(Request{PromptTokens: 8, MaxTokens: 8, TopP: true})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, sq)
	}
	e.Advance(time.Second)
	if e.Alive() {
		t.Fatal("engine alive, want dead of an OOM")
	}
	if !errors.Is(e.LastError(), ErrOutOfMemory) {
		t.Fatalf("LastError() = %v, want ErrOutOfMemory", e.LastError())
	}
	// the step that failed: the batch's first, every sequence sampling
	// with top-p, the allocator at the device's end
	if o, ok := e.LastOOM(); !ok || o.Err != e.LastError() || o.Seqs != 200 || o.Samples != 200 || !o.TopP ||
		o.Running != 200 || o.Alloc.DeviceFreeBytes > base.ActivationBudgetBytes {
		t.Fatalf("LastOOM() = %+v, %v", o, ok)
	}
	for i, sq := range seqs {
		if sq.State() != SeqFailed || !errors.Is(sq.Err(), ErrEngineDead) {
			t.Fatalf("seq %d: %v %v, want failed with ErrEngineDead", i, sq.State(), sq.Err())
		}
	}
	if n := len(e.TakeFinished()); n != 200 {
		t.Fatalf("TakeFinished() has %d, want 200", n)
	}
	if _, err := e.Submit(Request{PromptTokens: 8, MaxTokens: 8}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Submit while dead = %v, want ErrUnavailable", err)
	}
	m := e.Metrics()
	if m.OOMs != 1 || m.Alive || m.Running != 0 || m.Waiting != 0 {
		t.Fatalf("metrics while dead: %+v", m)
	}
	e.Advance(90 * time.Second)
	if !e.Alive() || e.Metrics().Restarts != 1 || e.Metrics().Allocator.NumAllocRetries != 0 {
		t.Fatalf("after RestartTime: alive %v, %+v", e.Alive(), e.Metrics())
	}
	sq, err := e.Submit(Request{PromptTokens: 8, MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	e.Advance(100 * time.Second)
	if sq.State() != SeqFinished {
		t.Fatalf("request after restart: %v %v, want finished", sq.State(), sq.Err())
	}
}

func TestAbort(t *testing.T) {
	e := newEngine(t, Settings{MaxNumSeqs: 1})
	a, _ := e.Submit(Request{PromptTokens: 10, MaxTokens: 100})
	b, _ := e.Submit(Request{PromptTokens: 10, MaxTokens: 100})
	e.Advance(10 * time.Millisecond)
	e.Abort(a) // running
	e.Abort(b) // waiting
	m := e.Metrics()
	if a.State() != SeqAborted || b.State() != SeqAborted || m.Running != 0 || m.Waiting != 0 || m.KVCacheUsage != 0 {
		t.Fatalf("after aborts: %v %v %+v", a.State(), b.State(), m)
	}
	e.Advance(time.Hour)
	if a.Generated() >= 100 {
		t.Fatalf("aborted request kept generating: %d", a.Generated())
	}
}

// workload submits Poisson arrivals of mixed short and long requests.
type workload struct {
	r    *rand.Rand
	qps  float64
	next time.Duration
}

func (w *workload) request() Request {
	if w.r.IntN(10) < 9 { // short chat
		return Request{PromptTokens: 20 + w.r.IntN(280), MaxTokens: 300, OutputTokens: 20 + w.r.IntN(280), TopP: w.r.IntN(2) == 0}
	}
	return Request{PromptTokens: 1000 + w.r.IntN(2000), MaxTokens: 512, OutputTokens: 50 + w.r.IntN(450), TopP: w.r.IntN(2) == 0}
}

// drive runs the engine under the workload until virtual time end and
// returns a digest of every finished request.
func drive(e *Engine, w *workload, end time.Duration) (uint64, int) {
	h := fnv.New64a()
	n := 0
	for w.next < end {
		e.Advance(w.next)
		_, _ = e.Submit(w.request()) // refused while dead: counted by the caller's metrics
		w.next += time.Duration(w.r.ExpFloat64() / w.qps * float64(time.Second))
		for _, s := range e.TakeFinished() {
			fmt.Fprintf(h, "%d %v %d %v|", s.ID(), s.State(), s.Generated(), s.FinishedAt())
			n++
		}
	}
	return h.Sum64(), n
}

func TestDeterminism(t *testing.T) {
	run := func() (uint64, int, Metrics) {
		e := newEngine(t, Settings{GPUMemoryUtilization: 0.97})
		h, n := drive(e, &workload{r: rand.New(rand.NewPCG(7, 7)), qps: 10}, 2*time.Minute)
		return h, n, e.Metrics()
	}
	h1, n1, m1 := run()
	h2, n2, m2 := run()
	if h1 != h2 || n1 != n2 || m1 != m2 {
		t.Fatalf("two runs with the same seed differ: %x/%d vs %x/%d\n%+v\n%+v", h1, n1, h2, n2, m1, m2)
	}
	if n1 < 1000 {
		t.Fatalf("only %d requests finished in 2 virtual minutes at 10 QPS", n1)
	}
}

// TestGolden pins a digest of every finished request and of the metrics
// every 10 virtual seconds, per setting, to the figures of the code before
// issue 15 step 6's speed-ups: a faster allocator or scheduler must not
// change a single result (OOMs, retries, preemptions, block counts).
func TestGolden(t *testing.T) {
	h100, _ := GPUByName("H100-80G")
	tests := []struct {
		name string
		s    Settings
		want uint64
	}{
		{"defaults", Settings{}, 0xf2e1d1eeff49c631},
		{"0.99 retries", Settings{GPUMemoryUtilization: 0.99}, 0xce572d345aa6d074},
		{"max split size", Settings{GPUMemoryUtilization: 0.97, MaxSplitSize: 200 * mib}, 0x74c65422f09eba79},
		{"expandable segments", Settings{ExpandableSegments: true}, 0xc6a5b9140d2b2e64},
		{"cuda graphs", Settings{CUDAGraphMaxTokens: 512}, 0xd1f5eaeed18488a8},
		{"H100 at 0.99 OOMs", Settings{GPU: h100, GPUMemoryUtilization: 0.99}, 0xc0308fc01a919183},
		{"small KV cache preempts", Settings{NumGPUBlocksOverride: 3000}, 0x98d91cffbb994f83},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEngine(t, tt.s)
			w := &workload{r: rand.New(rand.NewPCG(5, 5)), qps: 60}
			h := fnv.New64a()
			for end := 10 * time.Second; end <= 5*time.Minute; end += 10 * time.Second {
				d, n := drive(e, w, end)
				fmt.Fprintf(h, "%x %d %+v|", d, n, e.Metrics())
			}
			if got := h.Sum64(); got != tt.want {
				t.Fatalf("digest = %#x, want %#x (metrics at the end: %+v)", got, tt.want, e.Metrics())
			}
		})
	}
}

// TestStepMemoChangesNothing runs the same workload with and without the
// memos of steps (the repeated step skipped whole, and the large-pool calls
// of a step seen before on the same large-pool state only counted): every
// figure and the allocator's state must agree, and both memos must fire.
func TestStepMemoChangesNothing(t *testing.T) {
	for _, u := range []float64{0.9, 0.97} {
		run := func(noMemo bool) (uint64, Metrics, AllocStats, int64, int64) {
			e := newEngine(t, Settings{GPUMemoryUtilization: u})
			e.step.noMemo = noMemo
			h, _ := drive(e, &workload{r: rand.New(rand.NewPCG(3, 3)), qps: 12}, 3*time.Minute)
			return h, e.Metrics(), e.alloc.Stats(), e.step.skipped, e.step.memoHits
		}
		h1, m1, a1, skipped, hits := run(false)
		h2, m2, a2, _, _ := run(true)
		if h1 != h2 || m1 != m2 || a1 != a2 || skipped == 0 || hits == 0 {
			t.Fatalf("at %v memo on/off differ (skipped %d, large-pool hits %d):\n%+v\n%+v\n%+v\n%+v", u, skipped, hits, m1, m2, a1, a2)
		}
	}
}

// BenchmarkEngine reports virtual seconds simulated per real second under a
// mixed workload near saturation.
func BenchmarkEngine(b *testing.B) {
	e := newEngine(b, Settings{})
	w := &workload{r: rand.New(rand.NewPCG(1, 1)), qps: 15}
	b.ReportAllocs()
	var virt time.Duration
	for b.Loop() {
		virt += time.Minute
		drive(e, w, virt)
	}
	m := e.Metrics()
	b.ReportMetric(virt.Seconds()/b.Elapsed().Seconds(), "vsec/s")
	b.ReportMetric(float64(m.Steps)/b.Elapsed().Seconds(), "steps/s")
}

// TestCUDAGraphsLeaveOnlyTheSampler checks the V1 what-if by hand: a step of
// at most CUDAGraphMaxTokens tokens allocates only the request's tensor and
// the LM head and sampler buffers of its one sampling sequence.
func TestCUDAGraphsLeaveOnlyTheSampler(t *testing.T) {
	e := newEngine(t, Settings{CUDAGraphMaxTokens: 512})
	base := e.Metrics().Allocator.AllocatedBytes
	if _, err := e.Submit(Request{PromptTokens: 100, MaxTokens: 5}); err != nil {
		t.Fatal(err)
	}
	e.Advance(time.Minute)
	// request tensor (105 × 8 B → 1024) + last hidden 8192 + probs 513 024 +
	// float32 logits 513 024 + sampled ids 512 (the bf16 logits are freed
	// before the probabilities are allocated).
	want := base + 1024 + 8192 + 256512 + 513024 - 256512 - 8192 + 513024 + 512
	if got := e.Metrics().Allocator.PeakAllocatedBytes; got != want {
		t.Fatalf("PeakAllocatedBytes = %d, want %d", got, want)
	}
	eager := newEngine(t, Settings{})
	if eager.Plan().NumGPUBlocks != e.Plan().NumGPUBlocks {
		t.Fatalf("graphs changed the KV cache: %d vs %d blocks", e.Plan().NumGPUBlocks, eager.Plan().NumGPUBlocks)
	}
}

// TestPromptLogprobsBuffers: a step that computes a prompt_logprobs
// request's prompt also holds the LM head's logits over those tokens (bf16)
// and their float32 log-softmax: 100 tokens × 128 256 × (2 + 4) bytes on a
// Llama 3, far above its one sampling sequence's buffers.
func TestPromptLogprobsBuffers(t *testing.T) {
	e := newEngine(t, Settings{CUDAGraphMaxTokens: 512})
	base := e.Metrics().Allocator.AllocatedBytes
	if _, err := e.Submit(Request{PromptTokens: 100, MaxTokens: 5, PromptLogprobs: true}); err != nil {
		t.Fatal(err)
	}
	e.Advance(time.Minute)
	want := base + 1024 + 100*128256*2 + 100*128256*4 // request tensor, then both logits tensors at once
	if got := e.Metrics().Allocator.PeakAllocatedBytes; got != want {
		t.Fatalf("PeakAllocatedBytes = %d, want %d", got, want)
	}
}
