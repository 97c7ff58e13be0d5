package traffic

import "strings"

// CharsPerToken is how many characters of prompt text count as one token:
// the simulator's estimate (sim/server's CharsPerToken default).
const CharsPerToken = 4

// filler is the prompt text; prompts are prefixes of it repeated.
const filler = "A caching allocator keeps freed blocks inside the segments it reserved, so " +
	"a later request of a similar size is served without asking the driver. Mixed prompt " +
	"lengths leave odd-sized holes between long-lived tensors, and after hours of uptime the " +
	"free memory is plentiful but no single block is large enough for the next activation " +
	"buffer. "

// Filler returns prose of tokens × CharsPerToken characters (none for
// tokens ≤ 0).
func Filler(tokens int) string {
	n := max(tokens, 0) * CharsPerToken
	var b strings.Builder
	b.Grow(n)
	for b.Len() < n {
		b.WriteString(filler[:min(len(filler), n-b.Len())])
	}
	return b.String()
}

// ChatRequest is an OpenAI chat/completions body.
type ChatRequest struct {
	Model         string         `json:"model"`
	Messages      []Message      `json:"messages"`
	MaxTokens     int            `json:"max_tokens"`
	Stream        bool           `json:"stream"`
	StreamOptions *StreamOptions `json:"stream_options,omitempty"`
}

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// StreamOptions are a streamed request's options.
type StreamOptions struct {
	// IncludeUsage asks for a last chunk with the token usage.
	IncludeUsage bool `json:"include_usage"`
}

// Chat returns a chat/completions body with one user message. A streamed
// one asks for the usage chunk, as OpenAI's clients do.
func Chat(model, content string, maxTokens int, stream bool) ChatRequest {
	r := ChatRequest{Model: model, Messages: []Message{{Role: "user", Content: content}}, MaxTokens: maxTokens, Stream: stream}
	if stream {
		r.StreamOptions = &StreamOptions{IncludeUsage: true}
	}
	return r
}

// CompletionRequest is an OpenAI completions body.
type CompletionRequest struct {
	Model     string `json:"model"`
	Prompt    string `json:"prompt"`
	MaxTokens int    `json:"max_tokens"`
	Stream    bool   `json:"stream"`
}
