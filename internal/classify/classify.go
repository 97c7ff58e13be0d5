package classify

// Request is what classification learns from a request: its model, whether
// it streams, and what it is estimated to cost in tokens.
type Request struct {
	// Model is the body's "model", "" when absent.
	Model string
	// Stream is the body's "stream".
	Stream bool
	// Prompts is how many independent prompts the body holds: more than one
	// only for batched completions (a list of prompts) and embeddings (a
	// list of inputs), which vLLM runs as separate sequences.
	Prompts int
	// PromptTokens is the estimated input size over all prompts: text bytes
	// ÷ CharsPerToken rounded up (per prompt), plus token ids counted one
	// each, plus MediaTokens per media part.
	PromptTokens int64
	// MaxTokens is the output bound of each generated sequence: the body's
	// (max_completion_tokens, else max_tokens for chat; max_tokens for
	// completions; max_output_tokens for responses) or DefaultMaxTokens.
	// 0 for routes that generate nothing (embeddings, score).
	MaxTokens int64
	// DefaultMax reports that MaxTokens is Estimator.DefaultMaxTokens.
	DefaultMax bool
	// N is how many sequences are generated per prompt: the larger of "n"
	// and "best_of", 1 when absent.
	N int
	// media counts the media parts included in PromptTokens.
	media int
	// Estimated is the request's total estimate in tokens:
	// (PromptTokens + Prompts×MaxTokens) × N, at least 1 for inference
	// routes, saturating at math.MaxInt64. Each of the N sequences is a
	// child request in vLLM V1 that holds its own KV cache; prefix caching
	// may share the prompt's blocks, so this is an upper bound.
	Estimated int64
	// PromptLogprobs reports a "prompt_logprobs" that is not null
	// (completions and chat).
	PromptLogprobs bool
	// HasPriority reports a top-level "priority" key (vLLM's request
	// priority; its escapes decoded, matched exactly as vLLM matches it), so
	// that a front forwards the client's own priority rather than its
	// class's.
	HasPriority bool
	// Memory is the request's estimated transient GPU memory per vocabulary
	// entry (multiply by the model's vocabulary size for bytes): each of the
	// Prompts×N sequences it samples takes Estimator.BytesPerLogit in every
	// engine step's sampler, and prompt_logprobs adds PromptLogprobBytes
	// per prompt token (logits over the whole prompt). 0 for routes that
	// generate nothing. Saturates at math.MaxInt64.
	Memory int64
}

// Parse checks body with CheckJSON and classifies it as a request of kind.
// Kinds without a JSON body (kind.JSON() false) ignore body. Errors are
// *Error.
func Parse(kind Kind, body []byte, est Estimator) (Request, error) {
	if kind.JSON() {
		if err := CheckJSON(body); err != nil {
			return Request{}, err
		}
	}
	return classify(kind, body, est)
}

// classify reads the fields of body that decide a request's cost. body must
// have passed CheckJSON (Parse does both); on other input classify
// neither panics nor recurses without bound, but its result means nothing.
//
// Prompt shapes: completions' "prompt" and embeddings' "input" are a string,
// a list of strings, a list of token ids or a list of lists of token ids (a
// list is a batch of prompts, except a flat list of token ids, which is one);
// completions' "prompt_embeds" is counted like text, an over-estimate, since
// the tensor's shape is unknown. Chat's (and embeddings') "messages" hold
// objects with a "role" and a "content" that is a string, null or a list of
// parts: text parts count their text, image/audio/video/file parts count
// MediaTokens each. Other message fields (name, tool_calls, …), "tools",
// "functions", the Responses API's "input" and "instructions", and the whole
// body of score and rerank are counted generically: the bytes of every string,
// one token per number, MediaTokens per data: URL and per value of a media key
// such as "image_url" or "file_id" (see generic).
//
// Routes without a body: models cost nothing; an audio upload counts one media
// part plus DefaultMaxTokens of output.
func classify(kind Kind, body []byte, est Estimator) (Request, error) {
	est = est.withDefaults()
	switch kind {
	case KindModels:
		return Request{N: 1}, nil
	case KindAudio:
		c := Request{Prompts: 1, N: 1, media: 1, PromptTokens: est.mediaTokens,
			MaxTokens: est.DefaultMaxTokens, DefaultMax: true}
		c.Estimated = c.EstimatedTokens()
		return c, nil
	}
	p := bodyParser{r: reader{b: body}, est: est, kind: kind}
	return p.parse()
}
