package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"

	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// completionRequest holds the fields of /v1/completions and
// /v1/chat/completions bodies the simulator uses; the rest is ignored.
type completionRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []chatMessage   `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	TopP     *float64        `json:"top_p"`
	TopK     *int            `json:"top_k"`
	Logprobs json.RawMessage `json:"logprobs"`
	// PromptLogprobs is vLLM's extra parameter: logprobs over the prompt.
	PromptLogprobs *int `json:"prompt_logprobs"`
	IgnoreEOS      bool `json:"ignore_eos"`

	// content stands for the prompt's tokens, unit bytes a token, for the
	// prefix cache's block hashes (prefix.go); filled by promptTokens.
	content []byte
	unit    int
	hashes  []uint64 // the prompt's full blocks' chained hashes
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// promptTokens estimates a prompt's tokens: token-id arrays count as they
// are, text as ceil(chars ÷ CharsPerToken), plus 4 template tokens per chat message.
// It also renders the prompt into req.content for the prefix cache.
func (srv *Server) promptTokens(req *completionRequest, chat bool) (int, error) {
	chars, tokens := 0, 0
	req.unit = srv.s.CharsPerToken
	if chat {
		if len(req.Messages) == 0 {
			return 0, errors.New("messages must be a non-empty array")
		}
		for _, m := range req.Messages {
			var s string
			req.content = appendRole(req.content, m.Role, 4*srv.s.CharsPerToken)
			if json.Unmarshal(m.Content, &s) == nil {
				chars += len(s)
				req.content = append(req.content, s...)
			} else {
				var parts []struct {
					Text string `json:"text"`
				}
				if err := json.Unmarshal(m.Content, &parts); err != nil {
					return 0, errors.New("message content must be a string or an array of parts")
				}
				for _, p := range parts {
					chars += len(p.Text)
					req.content = append(req.content, p.Text...)
				}
			}
			tokens += 4
		}
	} else {
		var s string
		var ss []string
		var ids []int
		var idss [][]int
		switch {
		case json.Unmarshal(req.Prompt, &s) == nil:
			chars = len(s)
			req.content = []byte(s)
		case json.Unmarshal(req.Prompt, &ss) == nil:
			for _, x := range ss {
				chars += len(x)
				req.content = append(req.content, x...)
			}
		case json.Unmarshal(req.Prompt, &ids) == nil:
			tokens = len(ids)
			req.content, req.unit = appendIDs(req.content, ids), 4
		case json.Unmarshal(req.Prompt, &idss) == nil:
			for _, x := range idss {
				tokens += len(x)
				req.content = appendIDs(req.content, x)
			}
			req.unit = 4
		default:
			return 0, errors.New("prompt must be a string, an array of strings or token ids")
		}
	}
	tokens += (chars + srv.s.CharsPerToken - 1) / srv.s.CharsPerToken
	return max(tokens, 1), nil
}

// apiError is the OpenAI error object as vLLM writes it.
type apiError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   any    `json:"param"`
	Code    int    `json:"code"`
}

func errorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequestError"
	case http.StatusNotFound:
		return "NotFoundError"
	case http.StatusTooManyRequests:
		return "RateLimitError"
	}
	return "InternalServerError"
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]apiError{"error": {Message: msg, Type: errorType(status), Code: status}})
}

const msgUnavailable = "The server is overloaded or not ready yet."

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type message struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content,omitempty"`
}

type choice struct {
	Index        int      `json:"index"`
	Text         *string  `json:"text,omitempty"`
	Message      *message `json:"message,omitempty"`
	Delta        *message `json:"delta,omitempty"`
	Logprobs     any      `json:"logprobs"`
	FinishReason *string  `json:"finish_reason"`
}

type response struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *usage   `json:"usage"`
}

// call is one request being served.
type call struct {
	chat         bool
	id           string
	created      int64
	prompt       int
	maxTokens    int
	includeUsage bool
	words        *rand.Rand
	seq          *sim.Seq
	wait         *waiter
}

func (srv *Server) completions(w http.ResponseWriter, r *http.Request) { srv.generate(w, r, false) }

func (srv *Server) chatCompletions(w http.ResponseWriter, r *http.Request) { srv.generate(w, r, true) }

func (srv *Server) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, srv.s.MaxBodyBytes))
	if err != nil {
		writeError(w, http.StatusBadRequest, "Failed to read request body: "+err.Error())
		return
	}
	req, prompt, maxTokens, status, msg := srv.parse(body, chat)
	if status != 0 {
		writeError(w, status, msg)
		return
	}
	c, status, msg := srv.submit(&req, chat, prompt, maxTokens)
	if c == nil {
		writeError(w, status, msg)
		return
	}
	defer srv.finish(c)
	if req.Stream {
		srv.stream(w, r, c)
		return
	}
	srv.reply(w, r, c)
}

// parse decodes and checks a body; a non-zero status means it is refused
// with msg.
func (srv *Server) parse(body []byte, chat bool) (req completionRequest, prompt, maxTokens, status int, msg string) {
	if err := json.Unmarshal(body, &req); err != nil {
		return req, 0, 0, http.StatusBadRequest, "Failed to read and parse request body, " + err.Error()
	}
	if req.Model != "" && req.Model != srv.name {
		return req, 0, 0, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", req.Model)
	}
	prompt, err := srv.promptTokens(&req, chat)
	if err != nil {
		return req, 0, 0, http.StatusBadRequest, err.Error()
	}
	req.hashes = blockHashes(req.content, req.unit, srv.blockSize, prompt)
	maxTokens = srv.s.DefaultMaxTokens
	if req.MaxCompletionTokens != nil {
		maxTokens = *req.MaxCompletionTokens
	}
	if req.MaxTokens != nil {
		maxTokens = *req.MaxTokens
	}
	if maxTokens < 1 {
		return req, 0, 0, http.StatusBadRequest, "max_tokens must be at least 1"
	}
	return req, prompt, maxTokens, 0, ""
}

// submit hands the request to the engine; on failure it returns the status
// and message to answer with.
func (srv *Server) submit(req *completionRequest, chat bool, prompt, maxTokens int) (*call, int, string) {
	sr := sim.Request{PromptTokens: prompt, MaxTokens: maxTokens, BlockHashes: req.hashes,
		TopP:           (req.TopP != nil && *req.TopP < 1) || (req.TopK != nil && *req.TopK > 0),
		Logprobs:       len(req.Logprobs) > 0 && string(req.Logprobs) != "null" && string(req.Logprobs) != "false",
		PromptLogprobs: req.PromptLogprobs != nil}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	srv.advance()
	if !req.IgnoreEOS && !srv.s.FullOutput {
		sr.OutputTokens = 1 + srv.rng.IntN(maxTokens)
	}
	seq, err := srv.e.Submit(sr)
	switch {
	case errors.Is(err, sim.ErrUnavailable):
		return nil, http.StatusServiceUnavailable, msgUnavailable
	case errors.Is(err, sim.ErrTooLong):
		return nil, http.StatusBadRequest, fmt.Sprintf("This model's maximum context length is %d tokens. "+
			"However, you requested %d tokens (%d in the messages, %d in the completion). "+
			"Please reduce the length of the messages or completion.",
			srv.e.Settings().MaxModelLen, prompt+maxTokens, prompt, maxTokens)
	case err != nil:
		return nil, http.StatusBadRequest, err.Error()
	}
	srv.nextID++
	c := &call{chat: chat, created: srv.s.Now().Unix(), prompt: prompt, maxTokens: maxTokens,
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		words:        rand.New(rand.NewPCG(srv.s.Seed, srv.nextID)), seq: seq,
		wait: &waiter{notify: make(chan struct{}, 1)}}
	c.id = fmt.Sprintf("cmpl-sim-%d", srv.nextID)
	if chat {
		c.id = fmt.Sprintf("chatcmpl-sim-%d", srv.nextID)
	}
	srv.pending[seq] = c.wait
	return c, 0, ""
}

// finish forgets the call and aborts its request if it is still running
// (the client left): vLLM frees the KV cache of a disconnected request.
func (srv *Server) finish(c *call) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	delete(srv.pending, c.seq)
	if !c.seq.Done() {
		srv.e.Abort(c.seq)
	}
}

// progress is a consistent reading of a request's state.
type progress struct {
	generated int
	done      bool
	state     sim.SeqState
	err       error
}

func (srv *Server) progress(c *call) progress {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return progress{c.seq.Generated(), c.seq.Done(), c.seq.State(), c.seq.Err()}
}

func (c *call) finishReason(generated int) *string {
	reason := "stop"
	if generated >= c.maxTokens {
		reason = "length"
	}
	return &reason
}

func (c *call) usage(generated int) *usage {
	return &usage{PromptTokens: c.prompt, CompletionTokens: generated, TotalTokens: c.prompt + generated}
}

// vocabulary is the simulator's whole output language.
var vocabulary = [...]string{"the ", "GPU ", "memory ", "is ", "fine ", "today", ", ", "and ", "tokens ", "flow ",
	"through ", "a ", "batch ", "of ", "requests", ". "}

func (c *call) text(n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(vocabulary[c.words.IntN(len(vocabulary))])
	}
	return b.String()
}

func (srv *Server) reply(w http.ResponseWriter, r *http.Request, c *call) {
	var p progress
	for !p.done {
		select {
		case <-r.Context().Done():
			return // finish aborts the request
		case <-c.wait.notify:
		}
		p = srv.progress(c)
	}
	if p.state != sim.SeqFinished {
		writeError(w, http.StatusInternalServerError, engineErrorMessage(p.err))
		return
	}
	text := c.text(p.generated)
	resp := response{ID: c.id, Object: "text_completion", Created: c.created, Model: srv.name, Usage: c.usage(p.generated)}
	ch := choice{FinishReason: c.finishReason(p.generated)}
	if c.chat {
		resp.Object = "chat.completion"
		ch.Message = &message{Role: "assistant", Content: text}
	} else {
		ch.Text = &text
	}
	resp.Choices = []choice{ch}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

func engineErrorMessage(err error) string {
	return "EngineCore encountered an issue. See stack trace (above) for the root cause. (" + err.Error() + ")"
}
