package classify

// Top-level fields that classification reads, in topFields order.
const (
	fModel = iota
	fStream
	fN
	fBestOf
	fMaxTokens
	fMaxCompletionTokens
	fMaxOutputTokens
	fPrompt
	fPromptEmbeds
	fMessages
	fInput
	fInstructions
	fTools
	fFunctions
	fPromptLogprobs
)

var topFields = [...]string{"model", "stream", "n", "best_of", "max_tokens", "max_completion_tokens",
	"max_output_tokens", "prompt", "prompt_embeds", "messages", "input", "instructions", "tools", "functions",
	"prompt_logprobs"}

// bodyParser holds one classification's progress.
type bodyParser struct {
	r    reader
	est  Estimator
	kind Kind
	c    Request

	text    int64 // bytes of text of the single sequence (chat, responses, score, embedding messages)
	tokens  int64 // exact tokens: token ids, numbers, per-prompt estimates of batches
	prompts int   // prompts of a batch (completion prompt, embedding input)

	maxTokens, maxCompletion, maxOutput int64
	hasMax, hasOutput                   bool // completion's max_tokens may be 0; chat's 0 means unset
	n, bestOf                           int64
	hasInput, hasMessages               bool
}

func (p *bodyParser) parse() (Request, error) {
	r := &p.r
	if r.peek() != '{' {
		return Request{}, &Error{Message: "request body must be a JSON object", Code: codeInvalidJSON}
	}
	r.i++
	var kb [64]byte
	for r.more('}') {
		key := r.key(&kb)
		if string(key) == "priority" {
			p.c.HasPriority = true
		}
		idx, fold := field(key, topFields[:])
		if fold != "" {
			return Request{}, caseError("", key, fold)
		}
		if err := p.top(idx); err != nil {
			return Request{}, err
		}
	}
	return p.finish()
}

// top reads the value of top-level field idx (-1: unknown).
func (p *bodyParser) top(idx int) error {
	r, k := &p.r, p.kind
	var err error
	switch {
	case idx == fModel:
		p.c.Model, err = r.stringValue("model")
	case idx == fStream:
		p.c.Stream, err = r.boolValue("stream")
	case idx == fN && (k == KindCompletion || k == KindChat):
		p.n, _, err = r.intValue("n", 1)
	case idx == fBestOf && (k == KindCompletion || k == KindChat):
		p.bestOf, _, err = r.intValue("best_of", 1)
	case idx == fPromptLogprobs && (k == KindCompletion || k == KindChat):
		_, p.c.PromptLogprobs, err = r.intValue("prompt_logprobs", -1) // -1: the whole vocabulary
	case idx == fMaxTokens && (k == KindCompletion || k == KindChat):
		p.maxTokens, p.hasMax, err = r.intValue("max_tokens", 0)
	case idx == fMaxCompletionTokens && k == KindChat:
		p.maxCompletion, _, err = r.intValue("max_completion_tokens", 0)
	case idx == fMaxOutputTokens && k == KindResponses:
		p.maxOutput, p.hasOutput, err = r.intValue("max_output_tokens", 0)
	case idx == fPrompt && k == KindCompletion, idx == fInput && k == KindEmbedding:
		err = p.promptList(topFields[idx])
	case idx == fPromptEmbeds && k == KindCompletion:
		err = p.promptEmbeds()
	case idx == fMessages && (k == KindChat || k == KindEmbedding):
		err = p.messages()
	case (idx == fInput || idx == fInstructions) && k == KindResponses:
		p.hasInput = p.hasInput || idx == fInput
		p.generic(0, false)
	case (idx == fTools || idx == fFunctions) && (k == KindChat || k == KindResponses):
		p.generic(0, true) // a chat template renders the schemas, keys and all, into the prompt
	case k == KindScore && idx != fModel:
		p.generic(0, false)
	default:
		r.skip()
	}
	return err
}

// finish checks that the required field was present and computes the
// estimate.
func (p *bodyParser) finish() (Request, error) {
	c, k := p.c, p.kind
	missing := ""
	switch {
	case k == KindCompletion && p.prompts == 0:
		missing = "prompt"
	case k == KindEmbedding && p.prompts == 0 && !p.hasMessages:
		missing = "input"
	case k == KindChat && !p.hasMessages:
		missing = "messages"
	case k == KindResponses && !p.hasInput:
		missing = "input"
	}
	if missing != "" {
		return Request{}, &Error{Param: missing, Message: "required", Code: codeMissing}
	}
	c.Prompts = max(p.prompts, 1)
	c.PromptTokens = satAdd(p.tokens, p.est.tokens(p.text))
	c.N = int(max(p.n, p.bestOf, 1)) // parsed for completion and chat only
	switch {
	case k == KindEmbedding || k == KindScore:
		// Nothing is generated.
	case k == KindChat && p.maxCompletion != 0:
		// vLLM takes `max_completion_tokens or max_tokens`: Python's `or`
		// skips a 0 as well as a null.
		c.MaxTokens = p.maxCompletion
	case k == KindChat && p.maxTokens != 0, k == KindCompletion && p.hasMax:
		c.MaxTokens = p.maxTokens
	case k == KindResponses && p.hasOutput:
		c.MaxTokens = p.maxOutput
	default:
		c.MaxTokens, c.DefaultMax = p.est.DefaultMaxTokens, true
	}
	c.Estimated = c.EstimatedTokens()
	c.Memory = p.est.Memory(c)
	return c, nil
}
