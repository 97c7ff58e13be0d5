package sim

import "fmt"

// MemoryPlan is vLLM's start-up memory plan for the settings.
type MemoryPlan struct {
	// WeightBytes is parameters × dtype bytes (of one GPU: ÷ TensorParallel).
	WeightBytes int64
	// ActivationPeakBytes is the peak allocated by the profiling step (vLLM
	// reads PyTorch's allocated_bytes.all.peak the same way): an eager
	// forward pass of max_num_batched_tokens tokens over min(max_num_seqs,
	// tokens) sequences, then the sampler for one row per sequence as
	// _dummy_sampler_run runs it (top-k and top-p, no logprobs).
	ActivationPeakBytes int64
	// NonTorchBytes and CUDAGraphBytes are Settings', subtracted from the
	// KV cache as vLLM subtracts what it measured and estimated.
	NonTorchBytes, CUDAGraphBytes int64
	// CUDAContextBytes is Settings': on the device before vLLM's first
	// snapshot, so not in the plan.
	CUDAContextBytes int64
	// StaticBytes is what the model runner allocates outside the plan: its
	// persistent input buffers (before vLLM's snapshot of the weights) and
	// the native sampler's persistent Triton buffer (inside the profile's
	// peak, kept afterwards).
	StaticBytes int64
	// KVBytesPerToken is 2 × layers × KV heads × head dim × dtype bytes (of
	// one GPU: ÷ TensorParallel).
	KVBytesPerToken int64
	// NumGPUBlocks is the number of KV blocks of BlockSize tokens.
	NumGPUBlocks int
	// KVCacheBytes is NumGPUBlocks × BlockSize × KVBytesPerToken.
	KVCacheBytes int64
	// ActivationBudgetBytes is what the caching allocator can get from the
	// device at run time besides weights, KV cache and static buffers: the
	// profiled peak plus the headroom outside gpu_memory_utilization, less
	// the CUDA context and other processes.
	ActivationBudgetBytes int64
}

// planMemory follows vLLM's determine_available_memory (v0.21 and later):
// KV cache = total × gpu_memory_utilization − weights − activation peak −
// non-torch memory − the CUDA graphs' estimate. The CUDA context, taken
// before vLLM's first snapshot, and the runner's persistent buffers are not
// in it: they come out of the headroom. Like vLLM it refuses to start when
// the device has less free than gpu_memory_utilization of its total.
func planMemory(s Settings) (MemoryPlan, error) {
	tp := int64(s.TensorParallel)
	p := MemoryPlan{
		WeightBytes:      s.Model.WeightBytes() / tp,
		NonTorchBytes:    s.NonTorchBytes,
		CUDAGraphBytes:   s.CUDAGraphBytes,
		CUDAContextBytes: s.CUDAContextBytes,
		KVBytesPerToken:  s.Model.KVBytesPerToken() / tp,
	}
	for _, n := range persistentBuffers(s) {
		p.StaticBytes += n
	}
	scratch, err := NewAllocator(AllocSettings{DeviceBytes: 1 << 50})
	if err != nil {
		return p, err
	}
	r := stepRun{a: scratch}
	stepBuffers(&r, s, profileShape(s))
	r.exec(nil)
	if r.err != nil {
		return p, r.err
	}
	p.ActivationPeakBytes = scratch.Stats().PeakAllocatedBytes
	triton := tritonBufferBytes(s)
	p.StaticBytes += triton
	total := s.GPU.MemoryBytes
	requested := int64(float64(total) * s.GPUMemoryUtilization)
	if free := total - s.CUDAContextBytes - s.Neighbor.Base; free < requested {
		return p, fmt.Errorf("sim: free memory on the device at start-up (%d bytes) is less than gpu_memory_utilization %.2f × %d = %d bytes, as vLLM refuses",
			free, s.GPUMemoryUtilization, total, requested)
	}
	kv := requested - p.WeightBytes - p.ActivationPeakBytes - p.NonTorchBytes - p.CUDAGraphBytes
	perBlock := int64(s.BlockSize) * p.KVBytesPerToken
	p.NumGPUBlocks = int(max(kv, 0) / perBlock)
	if s.NumGPUBlocksOverride > 0 {
		p.NumGPUBlocks = s.NumGPUBlocksOverride
	}
	if p.NumGPUBlocks < 1 {
		return p, fmt.Errorf("sim: no room for a KV cache: %d × %.2f − weights %d − activations %d − non-torch %d − CUDA graphs %d = %d bytes",
			total, s.GPUMemoryUtilization, p.WeightBytes, p.ActivationPeakBytes, p.NonTorchBytes, p.CUDAGraphBytes, kv)
	}
	p.KVCacheBytes = int64(p.NumGPUBlocks) * perBlock
	p.ActivationBudgetBytes = s.deviceBytes() - s.OtherProcessBytes - s.Neighbor.Base - p.WeightBytes - p.KVCacheBytes - p.StaticBytes
	if need := p.ActivationPeakBytes - triton; p.ActivationBudgetBytes < need {
		return p, fmt.Errorf("sim: other processes leave %d bytes for activations, below the profiled peak %d",
			p.ActivationBudgetBytes, need)
	}
	return p, nil
}

// deviceBytes is what the caching allocator can draw segments from when no
// other process holds anything: the device less the CUDA context, the
// non-torch memory and the CUDA graphs' pool.
func (s Settings) deviceBytes() int64 {
	return s.GPU.MemoryBytes - s.CUDAContextBytes - s.NonTorchBytes - s.CUDAGraphBytes
}

// profileShape is vLLM's profiling step: _dummy_run of max_num_batched_tokens
// tokens spread over min(max_num_seqs, tokens) requests, eager, each request
// sampling one token in _dummy_sampler_run.
func profileShape(s Settings) stepShape {
	seqs := min(s.MaxNumSeqs, s.MaxNumBatchedTokens)
	return stepShape{tokens: s.MaxNumBatchedTokens, seqs: seqs, samples: seqs, profile: true}
}

// persistentBuffers are the model runner's input buffers, allocated once
// when it is built (vLLM V1's GPUModelRunner.__init__, sized for the largest
// step): input ids (int32), positions (int64), query start locations and
// sequence lengths (int32), the block table (int32, a row of
// ⌈max_model_len ÷ block_size⌉ per sequence), slot mapping (int64) and the
// input embeddings (tokens × hidden × dtype).
func persistentBuffers(s Settings) []int64 {
	T, n := int64(s.MaxNumBatchedTokens), int64(s.MaxNumSeqs)
	rows := int64((s.MaxModelLen + s.BlockSize - 1) / s.BlockSize)
	return []int64{T * 4, T * 8, (n + 1) * 4, n * 4, n * rows * 4, T * 8, T * int64(s.Model.Hidden) * int64(s.Model.DtypeBytes)}
}

// staticTensors lists the allocations made once at start-up, in vLLM's
// order: the runner's persistent buffers, the embedding and LM head, one
// tensor per decoder layer's weights, the native sampler's Triton buffer
// (made by the profile's second sampler call), then one KV cache tensor per
// layer (vLLM V1 allocates the KV cache per layer). With tensor parallelism
// each is this GPU's shard (the embedding and LM head split by vocabulary).
func (p MemoryPlan) staticTensors(s Settings) []int64 {
	m := s.Model
	out := persistentBuffers(s)
	embed := int64(m.Vocab) * int64(m.Hidden) * int64(m.DtypeBytes) / int64(s.TensorParallel)
	layer := (p.WeightBytes - 2*embed) / int64(m.Layers)
	out = append(out, embed, embed)
	for range m.Layers {
		out = append(out, layer)
	}
	if t := tritonBufferBytes(s); t > 0 {
		out = append(out, t)
	}
	kvLayer := p.KVCacheBytes / int64(m.Layers)
	for range m.Layers {
		out = append(out, kvLayer)
	}
	return out
}

// stepShape is what decides the sizes of one step's buffers.
type stepShape struct {
	tokens    int  // tokens computed in the step (prefill chunks + decodes)
	seqs      int  // sequences in the step
	samples   int  // sequences that sample a token at the end of the step
	maxBlocks int  // the widest block-table row in the batch
	topP      bool // some request samples with top-p/top-k
	logprobs  bool // some request wants log-probabilities
	graphed   bool // the forward pass replays a captured CUDA graph
	profile   bool // vLLM's profiling step: the sampler as _dummy_sampler_run runs it
	warmup    bool // the same at start-up's warm-up (the Triton buffer is already made)
	// promptLogits is the most prompt tokens one prompt_logprobs request
	// computes in the step (vLLM V1 takes such requests one at a time).
	promptLogits int
}

// stepRun records one step's allocator calls (stepBuffers makes them) and
// then executes them on an allocator (exec), stopping at the first error.
type stepRun struct {
	ops  []stepOp
	gets int   // get calls recorded, numbering them
	num  []int // largeTrace's scratch

	a    *Allocator
	live []Buffer // by get number
	virt []int64  // by get number: the block size of a memoised large get, else 0
	// sizes are the block sizes of the large gets, in order, from the last
	// execution that made them for real.
	sizes []int64
	err   error
	// mid, if set, receives the allocator's state in the middle of the step
	// (the mark op): what a reading taken while the step runs sees.
	mid *AllocStats
}

// stepOp is one recorded allocator call.
type stepOp struct {
	kind opKind
	n    int64 // opGet: bytes asked
	i    int   // opPut: the get number it frees
}

type opKind uint8

const (
	opGet    opKind = iota
	opPut           // free one get's buffer
	opMark          // the step's middle
	opPutAll        // free every buffer still live
)

// reset forgets the recorded calls.
func (r *stepRun) reset() { r.ops, r.gets = r.ops[:0], 0 }

func (r *stepRun) get(n int64) int {
	r.ops = append(r.ops, stepOp{kind: opGet, n: n})
	r.gets++
	return r.gets - 1
}

// put frees get number i's buffer; a negative i (no buffer) is nothing.
func (r *stepRun) put(i int) {
	if i >= 0 {
		r.ops = append(r.ops, stepOp{kind: opPut, i: i})
	}
}

// mark records the step's middle, where a reading from another thread most
// likely falls: inside the forward pass, a decoder layer's MLP temporaries
// live (the layers take most of a step's time).
func (r *stepRun) mark() { r.ops = append(r.ops, stepOp{kind: opMark}) }

func (r *stepRun) putAll() { r.ops = append(r.ops, stepOp{kind: opPutAll}) }

// putFrom frees every buffer from get number first on (those already freed
// stay freed).
func (r *stepRun) putFrom(first int) {
	for i := first; i < r.gets; i++ {
		r.put(i)
	}
}

// isLarge reports whether a request of n bytes goes to the large pool.
func isLarge(n int64) bool { return roundSize(n) > smallSize }

// exec makes the recorded calls on r.a. With memo (the block sizes of the
// large gets, from an earlier execution of the same large calls on the same
// large-pool state that left that state as it found it), the large gets and
// puts only count their bytes: the pools are independent, so the small
// calls run for real around them and end where a full execution would.
func (r *stepRun) exec(memo []int64) {
	a := r.a
	r.err = nil
	r.live = append(r.live[:0], make([]Buffer, r.gets)...)
	r.virt = append(r.virt[:0], make([]int64, r.gets)...)
	r.sizes = r.sizes[:0]
	g, k := 0, 0 // get number, large get number
	free := func(i int) {
		if v := r.virt[i]; v > 0 {
			a.allocated -= v
			a.requested -= r.live[i].req
			r.virt[i] = 0
		} else if r.live[i].Valid() {
			_ = a.Free(r.live[i]) // live[i] came from Alloc and is freed once
		}
		r.live[i] = Buffer{}
	}
	for _, op := range r.ops {
		switch op.kind {
		case opGet:
			large := isLarge(op.n)
			if memo != nil && large {
				r.virt[g] = memo[k]
				r.live[g] = Buffer{req: op.n}
				a.allocated += memo[k]
				a.requested += op.n
				a.peakAlloc = max(a.peakAlloc, a.allocated)
			} else {
				b, err := a.Alloc(op.n)
				if err != nil {
					r.err = err
					return
				}
				r.live[g] = b
				if large {
					r.sizes = append(r.sizes, b.Size())
				}
			}
			if large {
				k++
			}
			g++
		case opPut:
			free(op.i)
		case opMark:
			if r.mid != nil {
				*r.mid = a.Stats()
			}
		case opPutAll:
			for i := range r.live {
				free(i)
			}
		}
	}
}

// largeTrace hashes the recorded large-pool calls (sizes asked, and which
// large get each put frees) and counts the small gets.
func (r *stepRun) largeTrace() (h uint64, smallGets int) {
	h = 0x6c61726765 // "large"
	num := r.num[:0] // get number -> large get number, or -1
	for _, op := range r.ops {
		switch op.kind {
		case opGet:
			if isLarge(op.n) {
				num = append(num, len(num)-smallGets)
				h = mix64(h ^ mix64(1+uint64(op.n)))
			} else {
				num = append(num, -1)
				smallGets++
			}
		case opPut:
			if num[op.i] >= 0 {
				h = mix64(h ^ mix64(uint64(2+num[op.i])<<32))
			}
		case opPutAll:
			h = mix64(h ^ 3)
		}
	}
	r.num = num // keep the grown scratch for the next step
	return h, smallGets
}

// stepBuffers replays the allocations of one engine step in PyTorch's order:
// unless the step replays a CUDA graph, the residual stream and one decoder
// layer's temporaries (the other layers reuse the same cached blocks); the
// LM head and the sampler for the sequences that sample; then, the logits
// still held, a prompt_logprobs request's logits over its prompt tokens. The step's inputs live in the runner's persistent
// buffers (vLLM V1). Everything is freed at the end of the step; what stays
// is the allocator's cache. With tensor parallelism (≥ 1) it is one GPU's
// share: the attention and MLP temporaries are split, the hidden states are
// whole, and the LM head's logits are this GPU's slice of the vocabulary
// until vLLM V1 all-gathers them for the sampler.
func stepBuffers(r *stepRun, s Settings, sh stepShape) {
	m, tp := s.Model, s.TensorParallel
	T, S := int64(sh.tokens), int64(sh.samples)
	H, I, V, dt := int64(m.Hidden), int64(m.Intermediate), int64(m.Vocab), int64(m.DtypeBytes)
	qkvWidth := H + 2*int64(m.KVHeads)*int64(m.HeadDim)
	w := width{tp: int64(tp), qkv: qkvWidth / int64(tp), attn: H / int64(tp), mlp: I / int64(tp)}
	if !sh.graphed {
		forwardBuffers(r, T, H, w, dt)
	} else {
		r.mark() // the graphs' activations come from their private pool
	}
	if S > 0 {
		sampler := samplerRun{r: r, S: S, H: H, V: V, tp: w.tp, dt: dt}
		if sh.profile {
			if !sh.warmup {
				sampler.triton = tritonBufferBytes(s)
			}
			sampler.profile(s.Sampler)
		} else {
			sampler.step(s.Sampler, sh)
		}
	}
	if sh.promptLogits > 0 {
		// after sampling, the step's logits still held (sample_tokens, then
		// _get_prompt_logprobs_dict)
		promptLogprobBuffers(r, int64(sh.promptLogits), V, w.tp, dt)
	}
	r.putAll()
}

// width is one GPU's share of a layer's temporaries under tensor
// parallelism tp: the fused QKV projection, the attention output and the
// MLP's intermediate size, each ÷ tp.
type width struct{ tp, qkv, attn, mlp int64 }

// forwardBuffers are the residual stream and one decoder layer's
// temporaries; the other layers reuse the same cached blocks. The outputs
// of the row-parallel projections (o, down) are whole: all-reduced in place.
func forwardBuffers(r *stepRun, T, H int64, w width, dt int64) {
	r.get(T * H * dt) // hidden states
	r.get(T * H * dt) // residual
	qkv := r.get(T * w.qkv * dt)
	attn := r.get(T * w.attn * dt)
	r.put(qkv)
	o := r.get(T * H * dt)
	r.put(attn)
	gateUp := r.get(T * 2 * w.mlp * dt)
	act := r.get(T * w.mlp * dt)
	r.mark()
	r.put(gateUp)
	down := r.get(T * H * dt)
	r.put(act)
	r.put(o)
	r.put(down)
}

// promptLogprobBuffers are one prompt_logprobs request's: the LM head's
// logits over its prompt tokens in this step and their float32 log-softmax
// (vLLM V1's GPUModelRunner._get_prompt_logprobs_dict: compute_logits on
// the chunk's hidden states, then the sampler's compute_logprobs), freed
// before the next such request and before sampling.
func promptLogprobBuffers(r *stepRun, P, V, tp, dt int64) {
	if tp > 1 {
		r.put(r.get(P * V / tp * dt)) // this GPU's slice, all-gathered into the next
	}
	logits := r.get(P * V * dt)
	lp := r.get(P * V * 4)
	r.put(logits)
	r.put(lp)
}
