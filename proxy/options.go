package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Policy is the part of the configuration that a reload may change while
// requests are in flight. It is swapped atomically; each request reads one.
type Policy struct {
	// Observe computes, counts and logs every refusal but refuses nothing.
	Observe bool
	// MaxBodyBytes bounds a request body; larger bodies get 413. 0 means 10 MiB.
	MaxBodyBytes int64
	// RequestIDHeader carries the request id both ways. "" means X-Request-Id.
	RequestIDHeader string
	// ClientKeyHeader names the header whose value keys per-client buckets.
	// "" means no per-client limits.
	ClientKeyHeader string
	// CharsPerToken converts prompt characters to estimated tokens. 0 means 4.
	CharsPerToken float64
	// DefaultMaxTokens is the output estimate when a request sets none. 0 means 256.
	DefaultMaxTokens int64
	// BytesPerLogit is a sampled sequence's memory per vocabulary entry,
	// the unit of memory admission (classify.Estimator). 0 means 32.
	BytesPerLogit int64
	// PromptLogprobsChunk is the most prompt tokens a prompt_logprobs
	// request's estimate counts (classify.Estimator). 0 means 8192.
	PromptLogprobsChunk int64
	// MaxWait bounds the time a request waits for a window slot. 0 means 30s.
	MaxWait time.Duration
	// TTFTDeadline is a request's time-to-first-token deadline when its
	// class sets none: it waits at most this long, and is refused at once
	// (503 deadline) when the queue predicts it cannot start in time. 0:
	// none (MaxWait alone).
	TTFTDeadline time.Duration
	// DeadlineHeader names the header in which a client may tighten its own
	// deadline, in milliseconds; "" means clients cannot.
	DeadlineHeader string
	// RetryAfter is the Retry-After of 503 refusals. 0 means 2s.
	RetryAfter time.Duration
	// SendTimeout cuts an answer whose client takes no bytes of it for this
	// long (its pod request is cancelled, its slot freed). 0: none.
	SendTimeout time.Duration
	// Classes places requests into traffic classes; nil: none.
	Classes *Classes
	// ForwardPriority lists the upstreams whose forwarded bodies carry the
	// class as vLLM's "priority" field.
	ForwardPriority map[string]bool
}

func (p Policy) withDefaults() Policy {
	if p.MaxBodyBytes <= 0 {
		p.MaxBodyBytes = 10 << 20
	}
	if p.RequestIDHeader == "" {
		p.RequestIDHeader = "X-Request-Id"
	}
	if p.CharsPerToken <= 0 {
		p.CharsPerToken = 4
	}
	if p.DefaultMaxTokens <= 0 {
		p.DefaultMaxTokens = 256
	}
	if p.MaxWait <= 0 {
		p.MaxWait = 30 * time.Second
	}
	if p.RetryAfter <= 0 {
		p.RetryAfter = 2 * time.Second
	}
	if p.Classes != nil {
		cs := *p.Classes // the caller's stays untouched
		cs.compile()
		p.Classes = &cs
	}
	return p
}

// TransportSettings bounds every upstream connection. Zero fields take the
// defaults in brackets.
type TransportSettings struct {
	// DialTimeout bounds a TCP connect [2s].
	DialTimeout time.Duration
	// TLSHandshakeTimeout bounds a TLS handshake [5s].
	TLSHandshakeTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for response headers [10m]:
	// a non-streaming completion sends its headers only when it is done.
	ResponseHeaderTimeout time.Duration
	// IdleConnTimeout closes pooled connections before vLLM's 5 s keep-alive
	// does, so a request never lands on a connection the pod is closing [4s].
	IdleConnTimeout time.Duration
	// MaxIdleConnsPerHost bounds the pooled connections per pod [256].
	MaxIdleConnsPerHost int
}

// HealthSettings configures the active health check (GET path on each pod).
type HealthSettings struct {
	// Path is requested on each pod [/health].
	Path string
	// Interval between checks [5s]; negative disables the check.
	Interval time.Duration
	// Timeout of one check [2s].
	Timeout time.Duration
	// UnhealthyAfter consecutive failures mark a pod unhealthy [2].
	UnhealthyAfter int
	// HealthyAfter consecutive successes mark it healthy again [1].
	HealthyAfter int
}

// Options configures a Handler. Create one with New.
type Options struct {
	// Policy is the initial reloadable policy.
	Policy Policy
	// Upstreams is the initial list of pods; at least one.
	Upstreams []Upstream
	// Limiter is the fast breaker; nil admits everything.
	Limiter Limiter
	// Admission hands out window slots; required.
	Admission Admission
	// Levels says which upstreams are at critical pressure. Nil: none is.
	Levels Levels
	// OnPodRefused, if set, hears that a pod answered 503 or 429 itself (its
	// queue is full), so its window can be cut. It must not block.
	OnPodRefused func(upstream string)
	// ClassLimiter, if set, is every traffic class's own token bucket.
	ClassLimiter ClassLimiter
	// ModelLimiter, if set, is the token bucket of each model that has one.
	ModelLimiter ModelLimiter
	// Transport bounds upstream connections.
	Transport TransportSettings
	// Health configures the active health check run by Handler.Run.
	Health HealthSettings
	// RoundTripper, if set, replaces the transport built from Transport (tests).
	RoundTripper http.RoundTripper
	// Metrics receives counts; nil records nothing.
	Metrics *Metrics
	// Logger receives state changes and, at debug, one line per request.
	// Nil discards.
	Logger *slog.Logger
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
	// Version is reported in logs and the build info metric.
	Version string
	// Ready, if set, is one more condition of /readyz: a non-nil error
	// turns it 503 with the error's text (cluster mode: no share of any
	// pod's window yet).
	Ready func() error
}

func (o Options) validate() error {
	var errs []error
	if o.Admission == nil {
		errs = append(errs, errors.New("proxy: Options.Admission is required"))
	}
	if len(o.Upstreams) == 0 {
		errs = append(errs, errors.New("proxy: Options.Upstreams is empty"))
	}
	for i, u := range o.Upstreams {
		if u.Name == "" || u.URL == nil || u.URL.Host == "" {
			errs = append(errs, fmt.Errorf("proxy: Options.Upstreams[%d] needs a name and an absolute URL", i))
		}
	}
	return errors.Join(errs...)
}
