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
	// 80 GiB × 0.9 − weights − peak − non-torch 340 MiB − CUDA graphs 450
	// MiB, in blocks of 16 × 131072 bytes.
	want := (int64(float64(80*gib)*0.9) - 16_060_522_496 - p.ActivationPeakBytes - 340*mib - 450*mib) / (16 * 131072)
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
	// Other processes leave the allocator the profiled peak and 256 MiB:
	// the logits of a 2000-token prompt's prompt_logprobs (not in the
	// profile: 2000 × 128 256 × 6 bytes) cannot fit.
	s := Settings{OtherProcessBytes: base.ActivationBudgetBytes - base.ActivationPeakBytes - 256*mib}
	e := newEngine(t, s)
	var seqs []*Seq
	for i := range 200 {
		r := Request{PromptTokens: 8, MaxTokens: 8, TopP: true}
		if i == 0 {
			r = Request{PromptTokens: 2000, MaxTokens: 8, PromptLogprobs: true}
		}
		sq, err := e.Submit(r)
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
	// the step that failed: the batch's first, the long prompt and the
	// six short ones the 2048-token budget had room for
	if o, ok := e.LastOOM(); !ok || o.Err != e.LastError() || o.Seqs != 7 || o.PromptLogits != 2000 ||
		o.Running != 7 || o.Waiting != 193 || o.Alloc.DeviceFreeBytes > base.ActivationBudgetBytes {
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
	// plp, when > 0, makes one long request in plp ask for prompt_logprobs
	// (drawn only then: the other workloads are unchanged).
	plp int
}

func (w *workload) request() Request {
	if w.r.IntN(10) < 9 { // short chat
		return Request{PromptTokens: 20 + w.r.IntN(280), MaxTokens: 300, OutputTokens: 20 + w.r.IntN(280), TopP: w.r.IntN(2) == 0}
	}
	r := Request{PromptTokens: 1000 + w.r.IntN(2000), MaxTokens: 512, OutputTokens: 50 + w.r.IntN(450), TopP: w.r.IntN(2) == 0}
	r.PromptLogprobs = w.plp > 0 && w.r.IntN(w.plp) == 0
	return r
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
// every 10 virtual seconds, per setting (OOMs, allocator retries, refused
// restarts, preemptions, a neighbour), to the figures of the model as issue
// 34 made it: a faster allocator or scheduler must not change a single
// result. A change of the model itself changes them on purpose; its commit
// says why.
func TestGolden(t *testing.T) {
	h100, _ := GPUByName("H100-80G")
	tests := []struct {
		name string
		s    Settings
		plp  int
		want uint64
	}{
		{"defaults", Settings{}, 0, 0x1d844a10cb51e410},
		{"0.99", Settings{GPUMemoryUtilization: 0.99}, 0, 0xb5446f3397530fa6},
		{"max split size", Settings{GPUMemoryUtilization: 0.97, MaxSplitSize: 200 * mib}, 0, 0x77205c7bebb8f1ba},
		{"expandable segments", Settings{ExpandableSegments: true}, 0, 0x111f123372226684},
		{"enforce eager", Settings{EnforceEager: true}, 0, 0x43337d472f5519af},
		{"sort sampler", Settings{Sampler: SamplerSort}, 0, 0x783d7a1669a12660},
		{"H100 at 0.99 retries", Settings{GPU: h100, GPUMemoryUtilization: 0.99}, 0, 0x838bece9f4a1d990},
		{"small KV cache preempts", Settings{NumGPUBlocksOverride: 3000}, 0, 0x648105f808652406},
		{"a neighbour takes the headroom", Settings{GPUMemoryUtilization: 0.97, Neighbor: Neighbor{Base: gib,
			Peaks: []NeighborPeak{{At: 30 * time.Second, For: 2 * time.Minute, Share: 0.98}, {At: 3 * time.Minute, For: time.Hour, Bytes: 100 * mib}}}}, 4, 0xb287a66c62cca193},
		{"prompt_logprobs at 0.99 OOMs", Settings{GPUMemoryUtilization: 0.99}, 4, 0xe70ae459603dd13},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEngine(t, tt.s)
			w := &workload{r: rand.New(rand.NewPCG(5, 5)), qps: 60, plp: tt.plp}
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

// TestCUDAGraphsLeaveOnlyTheSampler checks vLLM V1's default by hand: a
// step of at most CUDAGraphMaxTokens tokens allocates from the cache only
// the LM head and the sampler's buffers of its one sampling sequence.
func TestCUDAGraphsLeaveOnlyTheSampler(t *testing.T) {
	e := newEngine(t, Settings{})
	base := e.Metrics().Allocator.AllocatedBytes
	e.alloc.ResetPeakStats()
	if _, err := e.Submit(Request{PromptTokens: 100, MaxTokens: 5}); err != nil {
		t.Fatal(err)
	}
	e.Advance(time.Minute)
	// last hidden 8192 + bf16 logits 256 512 + float32 logits 513 024 +
	// probabilities and the exponential draw 2 × 513 024 (no top-p: the
	// native path) + sampled ids 512, all live to the step's end.
	want := base + 8192 + 256512 + 3*513024 + 512
	if got := e.Metrics().Allocator.PeakAllocatedBytes; got != want {
		t.Fatalf("PeakAllocatedBytes = %d, want %d", got, want)
	}
	eager := newEngine(t, Settings{EnforceEager: true})
	if d := eager.Plan().NumGPUBlocks - e.Plan().NumGPUBlocks; d != int(450*mib/(16*131072)) {
		t.Fatalf("eager has %d more KV blocks, want the CUDA graphs' 450 MiB", d)
	}
}

// TestPromptLogprobsBuffers: a step that computes a prompt_logprobs
// request's prompt also holds the LM head's logits over those tokens (bf16)
// and their float32 log-softmax: 100 tokens × 128 256 × (2 + 4) bytes on a
// Llama 3, far above its one sampling sequence's buffers.
func TestPromptLogprobsBuffers(t *testing.T) {
	e := newEngine(t, Settings{})
	base := e.Metrics().Allocator.AllocatedBytes
	e.alloc.ResetPeakStats()
	if _, err := e.Submit(Request{PromptTokens: 100, MaxTokens: 5, PromptLogprobs: true}); err != nil {
		t.Fatal(err)
	}
	e.Advance(time.Minute)
	// after the sampler, its hidden states (8192), logits (256 512) and ids
	// (512) still held, both prompt logits tensors at once
	want := base + 8192 + 256512 + 512 + 100*128256*2 + 100*128256*4
	if got := e.Metrics().Allocator.PeakAllocatedBytes; got != want {
		t.Fatalf("PeakAllocatedBytes = %d, want %d", got, want)
	}
}
