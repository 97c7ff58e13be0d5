package sim

import "fmt"

// Sampler is the top-k/top-p implementation the engine's sampler uses
// (vllm/v1/sample/ops/topk_topp_sampler.py).
type Sampler int

const (
	// SamplerFlashInfer is vLLM's CUDA default since v0.21 (PR #40376):
	// FlashInfer samples top-k and top-p without sorting; a batch in which
	// no request uses top-k or top-p takes the native path (softmax, then
	// an exponential draw of the same shape), and the profile also runs the
	// native path's Triton kernel, whose row buffer stays allocated.
	SamplerFlashInfer Sampler = iota
	// SamplerSort is the PyTorch sort of the releases between October 2025
	// and February 2026 (and of any batch with a seeded request): sorted
	// values (float32) and indices (int64), the masks and a softmax over
	// them, then the native draw. A what-if.
	SamplerSort
)

// String names the sampler as -sampler spells it.
func (s Sampler) String() string {
	switch s {
	case SamplerFlashInfer:
		return "flashinfer"
	case SamplerSort:
		return "sort"
	}
	return fmt.Sprintf("Sampler(%d)", int(s))
}

// ParseSampler is the sampler String names.
func ParseSampler(name string) (Sampler, error) {
	for _, s := range []Sampler{SamplerFlashInfer, SamplerSort} {
		if s.String() == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("sim: unknown sampler %q (want flashinfer or sort)", name)
}

// tritonBufferBytes is the native sampler's persistent Triton row buffer,
// made by the profile's second sampler call and cached for the process's
// life (apply_top_k_top_p_triton's _TRITON_BUFFER_CACHE): min(next power
// of two of min(SMs, rows), SMs) rows of the vocabulary in float32; none
// for fewer than 8 rows (the PyTorch sort runs there) or with SamplerSort.
func tritonBufferBytes(s Settings) int64 {
	rows := min(s.MaxNumSeqs, s.MaxNumBatchedTokens)
	if s.Sampler != SamplerFlashInfer || rows < 8 {
		return 0
	}
	sms := max(s.GPU.SMs, 1)
	n := 1
	for n < min(sms, rows) {
		n *= 2
	}
	return int64(min(n, sms)) * int64(s.Model.Vocab) * 4
}

// samplerRun makes one step's LM head and sampler allocations for S rows
// of a vocabulary of V (vllm/v1/sample/sampler.py, Sampler.forward).
// triton is the Triton row buffer the profile makes (0 elsewhere: it is a
// static tensor of the process once made).
type samplerRun struct {
	r                       *stepRun
	S, H, V, tp, dt, triton int64
}

// lm is the LM head: the hidden states of the sampling positions and the
// logits in the model's dtype (all-gathered with tensor parallelism, this
// GPU's slice freed), alive until the step ends (the model runner holds
// them while it samples).
func (x samplerRun) lm() {
	r, S, V := x.r, x.S, x.V
	r.get(S * x.H * x.dt) // hidden states of the sampling positions
	if x.tp > 1 {
		r.put(r.get(S * V / x.tp * x.dt)) // this GPU's slice of the vocabulary
	}
	r.get(S * V * x.dt) // the logits
}

// cast is the sampler's float32 copy of the logits.
func (x samplerRun) cast() { x.r.get(x.S * x.V * 4) }

// native is the native path's draw: softmax probabilities and the
// exponential noise of the same shape (random_sample).
func (x samplerRun) native() {
	x.r.get(x.S * x.V * 4) // probabilities
	x.r.get(x.S * x.V * 4) // q = empty_like(probs).exponential_()
}

// sortTopKTopP is apply_top_k_top_p_pytorch: sorted values and their int64
// indices, the top-k mask, the softmax whose cumulative sum is written in
// place, and the top-p mask; scattered back into the logits in place.
func (x samplerRun) sortTopKTopP() {
	r, n := x.r, x.S*x.V
	vals := r.get(n * 4)
	idx := r.get(n * 8)
	r.put(r.get(n)) // top-k mask
	soft := r.get(n * 4)
	r.put(r.get(n)) // top-p mask
	r.put(soft)
	r.put(vals)
	r.put(idx)
}

// step is a serving step's sampler: the logits, the log-softmax a logprobs
// request needs (raw logprobs, computed first and kept), then the draw;
// its temporaries are freed when it returns the ids.
func (x samplerRun) step(s Sampler, sh stepShape) {
	x.lm()
	first := x.r.gets
	x.cast()
	if sh.logprobs {
		x.r.get(x.S * x.V * 4) // log_softmax in float32
	}
	switch {
	case !sh.topP: // no request filters: forward_cuda falls back to the native draw
		x.native()
	case s == SamplerFlashInfer: // top-p alone: softmax, then FlashInfer samples from it
		x.r.get(x.S * x.V * 4)
	default:
		x.sortTopKTopP()
		x.native()
	}
	ids := x.r.get(x.S * 8) // sampled token ids
	for i := first; i < ids; i++ {
		x.r.put(i) // the sampler's temporaries go; the logits and the ids stay to the step's end
	}
}

// profile is _dummy_sampler_run: every row samples with temperature, top-k
// and top-p and no logprobs, on the default path and then, with FlashInfer,
// once more forced onto the native one (whose Triton kernel makes its row
// buffer there).
func (x samplerRun) profile(s Sampler) {
	x.lm()
	first := x.r.gets
	x.cast()
	if s == SamplerSort {
		x.sortTopKTopP()
		x.native()
		return
	}
	// FlashInfer with top-k and top-p samples from the logits in place;
	// the call ends, its copy is freed.
	x.r.putFrom(first)
	x.cast()
	if x.triton > 0 {
		x.r.get(x.triton)
	}
	x.native()
}
