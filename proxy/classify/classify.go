package classify

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

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
	// MediaTokens is counted for each image, audio, video or file part and
	// each data: URL, whose real cost depends on the model's processor.
	// 0 (or less) means 1024.
	MediaTokens int64
}

func (e Estimator) withDefaults() Estimator {
	if !(e.CharsPerToken > 0) || math.IsInf(e.CharsPerToken, 0) {
		e.CharsPerToken = 4
	}
	if e.DefaultMaxTokens <= 0 {
		e.DefaultMaxTokens = 256
	}
	if e.MediaTokens <= 0 {
		e.MediaTokens = 1024
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
	// Media counts the media parts included in PromptTokens.
	Media int
	// Estimated is the request's total estimate in tokens:
	// (PromptTokens + Prompts×MaxTokens) × N, at least 1 for inference
	// routes, saturating at math.MaxInt64. Each of the N sequences is a
	// child request in vLLM V1 that holds its own KV cache; prefix caching
	// may share the prompt's blocks, so this is an upper bound.
	Estimated int64
}

// Codes of Error.
const (
	codeInvalidJSON  = "invalid_json"
	codeInvalidType  = "invalid_type"
	codeInvalidValue = "invalid_value"
	codeMissing      = "missing_required_parameter"
)

// Error is a body that gatekeeper refuses with 400 before it reaches a pod.
type Error struct {
	// Param is the path of the offending field ("messages[2].content"),
	// "" when the body as a whole is at fault.
	Param string
	// Message says what is wrong, for the client.
	Message string
	// Code is the OpenAI-style error code: "invalid_json", "invalid_type",
	// "invalid_value" or "missing_required_parameter".
	Code string
}

func (e *Error) Error() string {
	return "classify: " + e.ClientMessage()
}

// ClientMessage is the message for the OpenAI-style error body: Message,
// prefixed with Param when there is one.
func (e *Error) ClientMessage() string {
	if e.Param == "" {
		return e.Message
	}
	return e.Param + ": " + e.Message
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
		c := Request{Prompts: 1, N: 1, Media: 1, PromptTokens: est.MediaTokens,
			MaxTokens: est.DefaultMaxTokens, DefaultMax: true}
		c.Estimated = estimate(c)
		return c, nil
	}
	p := bodyParser{r: reader{b: body}, est: est, kind: kind}
	return p.parse()
}

// estimate computes Request.Estimated.
func estimate(c Request) int64 {
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
)

var topFields = [...]string{"model", "stream", "n", "best_of", "max_tokens", "max_completion_tokens",
	"max_output_tokens", "prompt", "prompt_embeds", "messages", "input", "instructions", "tools", "functions"}

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
	c.Estimated = estimate(c)
	return c, nil
}

// promptList reads a prompt or embedding input: a string, a list of strings,
// a list of token ids or a list of lists of token ids.
func (p *bodyParser) promptList(name string) error {
	r := &p.r
	switch r.peek() {
	case 'n':
		r.skip()
		return nil
	case '"':
		n, _ := r.text()
		p.addPrompt(n, 0)
		return nil
	case '[':
	default:
		return promptTypeError(name)
	}
	r.i++
	shape := byte(0)
	i := 0
	for ; r.more(']'); i++ {
		ch := r.peek()
		if ch == '-' || ch >= '0' && ch <= '9' {
			ch = '0'
		}
		if shape == 0 {
			shape = ch
		}
		if ch != shape {
			return &Error{Param: indexed(name, i), Code: codeInvalidType,
				Message: "all elements must have the same type: strings, token ids or lists of token ids"}
		}
		switch ch {
		case '"':
			n, _ := r.text()
			p.addPrompt(n, 0)
		case '0':
			if _, err := r.tokenID(name, i); err != nil {
				return err
			}
			p.tokens = satAdd(p.tokens, 1)
		case '[':
			ids, err := p.tokenIDs(indexed(name, i))
			if err != nil {
				return err
			}
			p.addPrompt(0, ids)
		default:
			return promptTypeError(indexed(name, i))
		}
	}
	if i == 0 {
		return &Error{Param: name, Message: "must not be empty", Code: codeInvalidValue}
	}
	if shape == '0' {
		p.prompts++
	}
	return nil
}

// addPrompt adds one prompt of a batch: its text is rounded up to tokens on
// its own, since vLLM runs each as a separate sequence.
func (p *bodyParser) addPrompt(textBytes, ids int64) {
	p.prompts++
	p.tokens = satAdd(p.tokens, satAdd(p.est.tokens(textBytes), ids))
}

// tokenIDs reads a list of token ids and returns its length.
func (p *bodyParser) tokenIDs(param string) (int64, error) {
	r := &p.r
	r.i++ // '['
	var n int64
	for r.more(']') {
		if _, err := r.tokenID(param, int(n)); err != nil {
			return 0, err
		}
		n++
	}
	return n, nil
}

func (p *bodyParser) promptEmbeds() error {
	switch p.r.peek() {
	case '"', '[':
		before := p.text
		p.generic(0, false)
		p.prompts++
		p.tokens = satAdd(p.tokens, p.est.tokens(p.text-before))
		p.text = before
		return nil
	case 'n':
		p.r.skip()
		return nil
	}
	return &Error{Param: "prompt_embeds", Code: codeInvalidType,
		Message: "must be a base64 string or a list of base64 strings"}
}

var (
	messageFields = [...]string{"role", "content"}
	partFields    = [...]string{"type", "text"}
	// mediaNames are the part types, and the keys, of image, audio, video and
	// file content parts in the OpenAI and vLLM chat formats.
	mediaNames = [...]string{"image_url", "input_image", "image", "image_embeds", "image_pil",
		"input_audio", "audio_url", "audio", "audio_embeds", "video_url", "video", "file", "input_file",
		"file_id", "file_data", "file_url"}
)

// generic counts any value: the bytes of its strings, one token per number;
// booleans and nulls count nothing. A data: URL, and the value of a key in
// mediaNames, count MediaTokens instead. With keys set (tool schemas) the
// bytes of object keys count too and no key means media. depth guards
// against input that skipped CheckJSON.
func (p *bodyParser) generic(depth int, keys bool) {
	r := &p.r
	switch ch := r.peek(); ch {
	case '"':
		n, data := r.text()
		if data {
			p.media()
			return
		}
		p.text = satAdd(p.text, n)
	case '{', '[':
		if depth >= maxJSONDepth {
			r.skip()
			return
		}
		closer := byte(']')
		if ch == '{' {
			closer = '}'
		}
		r.i++
		var kb [64]byte
		for r.more(closer) {
			if ch == '{' {
				k := r.key(&kb)
				switch {
				case keys:
					p.text = satAdd(p.text, int64(len(k)))
				case isMedia(k):
					p.media()
					r.skip()
					continue
				}
			}
			p.generic(depth+1, keys)
		}
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		r.skip()
		p.tokens = satAdd(p.tokens, 1)
	default:
		r.skip()
	}
}

func promptTypeError(param string) error {
	return &Error{Param: param, Code: codeInvalidType,
		Message: "must be a string, a list of strings, a list of token ids or a list of lists of token ids"}
}

func indexed(name string, i int) string { return name + "[" + strconv.Itoa(i) + "]" }

// field returns the index of key in names, or -1 when key is none of them.
// When key differs from one of names only in case (Unicode folding included,
// as Go's encoding/json matches fields), it returns that name as fold: Python
// reads field names case-sensitively, so such a key would mean different
// things to different readers, and the caller refuses it with caseError.
func field(key []byte, names []string) (idx int, fold string) {
	for i, n := range names {
		if string(key) == n {
			return i, ""
		}
	}
	ascii := true
	for _, ch := range key {
		if ch >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	for _, n := range names {
		if (!ascii || len(key) == len(n)) && strings.EqualFold(string(key), n) {
			return -1, n
		}
	}
	return -1, ""
}

func caseError(prefix string, key []byte, fold string) error {
	return &Error{Param: prefix + truncate(string(key), 64), Code: codeInvalidValue,
		Message: "field names are case-sensitive; did you mean " + strconv.Quote(fold) + "?"}
}
