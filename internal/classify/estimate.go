package classify

import "math"

// Estimator turns a request body into an estimated token count. The zero
// value selects the defaults.
type Estimator struct {
	// CharsPerToken is how many bytes of UTF-8 text count as one token. 0
	// (or less) means 4. Bytes rather than characters: the same for ASCII,
	// and closer to real token counts for scripts such as CJK, where one
	// three-byte character is often a token of its own.
	CharsPerToken float64
	// DefaultMaxTokens is the output bound assumed for a generating request
	// that sets none. 0 (or less) means 256. vLLM itself defaults to 16 for
	// completions and to the rest of the context window for chat, so this is
	// the operator's stand-in, not vLLM's value.
	DefaultMaxTokens int64
	// mediaTokens is counted for each image, audio, video or file part and
	// each data: URL, whose real cost depends on the model's processor.
	// 0 (or less) means 1024.
	mediaTokens int64
	// BytesPerLogit is the sampler's memory per vocabulary entry for each
	// sequence sampled in an engine step: logits (bf16 and fp32), and the
	// draw's probabilities and noise, about 14 bytes on vLLM's FlashInfer
	// sampler (its CUDA default since v0.21), about 30 with the PyTorch sort
	// of earlier releases (its values, int64 indices, masks and softmax);
	// 32 covers both. 0 (or less) means 32.
	BytesPerLogit int64
	// PromptLogprobsChunk is the most prompt tokens whose logits one
	// prompt_logprobs request holds at once: vLLM computes them one
	// scheduler chunk (the pod's max_num_batched_tokens) at a time. 0 (or
	// less) means DefaultPromptLogprobsChunk.
	PromptLogprobsChunk int64
}

// defaultPromptLogprobsChunk is the largest of vLLM V1's default
// max_num_batched_tokens (8192 on H100-class GPUs, 2048 on others).
const defaultPromptLogprobsChunk = 8192

// promptLogprobBytes is the memory per vocabulary entry and prompt token of
// prompt_logprobs: the prompt's fp32 logits and their log-softmax.
const promptLogprobBytes = 8

// Memory computes Request.Memory from c's Prompts, N, MaxTokens,
// PromptTokens and PromptLogprobs; the replay estimates its requests with it
// too. prompt_logprobs counts one chunk of the prompt (PromptLogprobsChunk
// tokens at most): vLLM frees a chunk's logits before it computes the next.
func (e Estimator) Memory(c Request) int64 {
	if c.MaxTokens == 0 {
		return 0
	}
	e = e.withDefaults()
	m := satMul(satMul(int64(c.Prompts), int64(c.N)), e.BytesPerLogit)
	if c.PromptLogprobs {
		m = satAdd(m, satMul(min(c.PromptTokens, e.PromptLogprobsChunk), promptLogprobBytes))
	}
	return m
}

func (e Estimator) withDefaults() Estimator {
	if !(e.CharsPerToken > 0) || math.IsInf(e.CharsPerToken, 0) {
		e.CharsPerToken = 4
	}
	if e.DefaultMaxTokens <= 0 {
		e.DefaultMaxTokens = 256
	}
	if e.mediaTokens <= 0 {
		e.mediaTokens = 1024
	}
	if e.BytesPerLogit <= 0 {
		e.BytesPerLogit = 32
	}
	if e.PromptLogprobsChunk <= 0 {
		e.PromptLogprobsChunk = defaultPromptLogprobsChunk
	}
	return e
}

// tokens converts n bytes of text to tokens, rounding up.
func (e Estimator) tokens(n int64) int64 {
	if n <= 0 {
		return 0
	}
	t := math.Ceil(float64(n) / e.CharsPerToken)
	if t >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(t)
}

// EstimatedTokens computes Request.Estimated from c's PromptTokens, Prompts,
// MaxTokens and N; the replay estimates its requests with it too.
func (c Request) EstimatedTokens() int64 {
	t := satMul(satAdd(c.PromptTokens, satMul(int64(c.Prompts), c.MaxTokens)), int64(c.N))
	return max(t, 1)
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// Sequences is how many sequences vLLM runs for c: Prompts × N (each of N
// is a child request in vLLM V1, and max_num_seqs counts them), at least 1,
// saturating at math.MaxInt32.
func (c Request) Sequences() int {
	return int(min(satMul(int64(max(c.Prompts, 1)), int64(max(c.N, 1))), math.MaxInt32))
}
