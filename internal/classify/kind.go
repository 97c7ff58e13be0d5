package classify

// Kind says what a forwarded route does, and so how its body is classified.
type Kind uint8

// The kinds of routes gatekeeper forwards.
const (
	// KindModels lists the served models; no GPU work.
	KindModels Kind = iota
	// KindCompletion is the legacy text completion API: prompt in, text out.
	KindCompletion
	// KindChat is the chat completion API: messages in, text out.
	KindChat
	// KindResponses is OpenAI's Responses API: input items in, output items out.
	KindResponses
	// KindEmbedding computes embeddings: input in, no generated tokens.
	KindEmbedding
	// KindScore scores or reranks text pairs: input in, no generated tokens.
	KindScore
	// KindAudio transcribes or translates an uploaded audio file (multipart
	// form, not JSON), text out.
	KindAudio
)

// String returns the kind's lower-case name, as used in logs and metrics.
func (k Kind) String() string {
	switch k {
	case KindModels:
		return "models"
	case KindCompletion:
		return "completion"
	case KindChat:
		return "chat"
	case KindResponses:
		return "responses"
	case KindEmbedding:
		return "embedding"
	case KindScore:
		return "score"
	case KindAudio:
		return "audio"
	default:
		return "unknown"
	}
}

// inference reports whether requests of this kind run on the GPU and so go
// through the breakers and the admission queue.
func (k Kind) inference() bool { return k != KindModels }

// JSON reports whether requests of this kind carry a JSON body, which Parse
// checks and reads: every kind but KindModels (no body) and KindAudio (a
// multipart form).
func (k Kind) JSON() bool { return k != KindModels && k != KindAudio }
