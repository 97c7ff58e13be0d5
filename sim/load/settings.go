package load

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim/traffic"
)

// Settings configures the demo's built-in traffic pattern (gatekeeper
// -demo-load): open-loop Poisson arrivals in a repeating cycle of phases
// (Phases): Steady at QPS, Burst at BurstFactor × QPS, Steady again, then a
// burst of long documents only (Documents at DocumentQPS, half of them
// sampling with top_p); a mix of short streaming chats and long documents
// otherwise. The zero value plus URL and Model selects the defaults.
type Settings struct {
	// URL is gatekeeper's traffic base URL ("http://127.0.0.1:8080").
	URL string
	// Model is the model name sent in every request.
	Model string
	// QPS is the steady arrival rate per second. 0 means 2, which the demo
	// pod serves with room to spare; its bursts (8 QPS) fill the KV cache.
	QPS float64
	// BurstFactor multiplies QPS during a burst. 0 means 4; must be ≥ 1.
	BurstFactor float64
	// Steady and Burst are the phase lengths. 0 means 30s and 15s.
	Steady, Burst time.Duration
	// Documents is the length of the document burst that closes every
	// cycle: long documents only, half of them with top_p 0.9 (the shapes
	// that fill the KV cache and widen the sampler's buffers). 0 means 15s;
	// negative means none (the cycle is then steady, burst).
	Documents time.Duration
	// DocumentQPS is the arrival rate during the document burst. 0 means
	// QPS ÷ 2: at the default 1/s, 15 s of documents (≈ 45 000 prompt
	// tokens) fill the demo pod's KV cache (44 480 tokens) and leave the
	// steady phase after it to recover in.
	DocumentQPS float64
	// DocumentPromptLogprobs is the share of the document burst's requests
	// that ask for prompt_logprobs (vLLM's extra parameter, as evaluation
	// and scoring jobs send it): the pod computes fp32 logits over the whole
	// vocabulary for every prompt token, the largest transient buffers a
	// request can make. 0 means none; at most 1.
	DocumentPromptLogprobs float64
	// LongFraction is the share of long documents (2 000–4 000 prompt
	// tokens, up to 512 out); the rest are short chats (50–200 tokens, up to
	// 128 out, streamed). 0 means 0.2; negative means none; at most 1.
	LongFraction float64
	// MaxConcurrent bounds the requests in flight; an arrival beyond it is
	// skipped (counted, never sent). 0 means 128.
	MaxConcurrent int
	// MaxRequests bounds the arrivals over the run. 0 means 1 000 000.
	MaxRequests int
	// RequestTimeout bounds one request, body included. 0 means 2m.
	RequestTimeout time.Duration
	// ReportEvery is the interval between summary log lines. 0 means 5s.
	ReportEvery time.Duration
	// Seed makes the arrivals and request mix reproducible.
	Seed uint64
	// Client sends the requests. Nil means a client of the generator's own
	// (NewClient(MaxConcurrent)).
	Client Doer
	// Logger receives phase changes and summaries. Nil discards.
	Logger *slog.Logger
	// State, if set, adds the proxy's state to each summary line (in a
	// "gatekeeper" group).
	State func() []slog.Attr
	// OnResult, if set, is called as each request ends, with its status
	// (0 for a transport error), from the request's goroutine.
	OnResult func(status int)
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
}

// Doer is what the load generator needs from an HTTP client.
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// withDefaults fills the zero fields and checks the rest.
func (s Settings) withDefaults() (Settings, error) {
	if s.URL == "" || s.Model == "" {
		return s, errors.New("load: URL and Model are required")
	}
	s.QPS = orFloat(s.QPS, 2)
	s.BurstFactor = orFloat(s.BurstFactor, 4)
	s.LongFraction = orFloat(s.LongFraction, 0.2)
	if s.QPS < 0 || s.BurstFactor < 1 || s.LongFraction > 1 {
		return s, fmt.Errorf("load: qps %g, burst factor %g, long fraction %g out of range",
			s.QPS, s.BurstFactor, s.LongFraction)
	}
	s.Steady = orDuration(s.Steady, 30*time.Second)
	s.Burst = orDuration(s.Burst, 15*time.Second)
	if s.Documents == 0 {
		s.Documents = 15 * time.Second
	}
	s.DocumentQPS = orFloat(s.DocumentQPS, s.QPS/2)
	if s.DocumentQPS < 0 {
		return s, fmt.Errorf("load: document qps %g out of range", s.DocumentQPS)
	}
	if !(s.DocumentPromptLogprobs >= 0 && s.DocumentPromptLogprobs <= 1) {
		return s, fmt.Errorf("load: document prompt_logprobs share %g out of range [0, 1]", s.DocumentPromptLogprobs)
	}
	s.RequestTimeout = orDuration(s.RequestTimeout, 2*time.Minute)
	s.ReportEvery = orDuration(s.ReportEvery, 5*time.Second)
	if s.MaxConcurrent <= 0 {
		s.MaxConcurrent = 128
	}
	if s.MaxRequests <= 0 {
		s.MaxRequests = 1_000_000
	}
	if s.Client == nil {
		s.Client = NewClient(s.MaxConcurrent)
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	return s, nil
}

// mix is the request mix: LongFraction long documents (answered whole), the
// rest short streamed chats. Lengths are in tokens.
func (s Settings) mix() traffic.Mix {
	long, short := longClass(s.LongFraction), shortClass(1-s.LongFraction)
	switch {
	case s.LongFraction <= 0:
		return traffic.Mix{short}
	case s.LongFraction >= 1:
		return traffic.Mix{long}
	}
	return traffic.Mix{long, short}
}

// longClass is a document to summarise: 2 000–4 000 prompt tokens, up to
// 512 out, answered whole.
func longClass(weight float64) traffic.Class {
	return traffic.Class{Name: "long", Weight: weight, Prompt: traffic.Range{Min: 2000, Max: 4000},
		Output: traffic.Range{Min: 128, Max: 512}, MaxTokens: 512}
}

// shortClass is a chat: 50–200 prompt tokens, up to 128 out, streamed.
func shortClass(weight float64) traffic.Class {
	return traffic.Class{Name: "short", Weight: weight, Prompt: traffic.Range{Min: 50, Max: 200},
		Output: traffic.Range{Min: 16, Max: 128}, MaxTokens: 128, Stream: true}
}

// NewClient returns the generator's default client: its own transport sized
// to the concurrency bound, never http.DefaultClient.
func NewClient(maxConns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: maxConns, IdleConnTimeout: 30 * time.Second,
		DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
	}}
}

func orFloat(v, def float64) float64 {
	if v == 0 || math.IsNaN(v) {
		return def
	}
	return v
}

func orDuration(v, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return v
}
