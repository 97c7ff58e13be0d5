package decide

import "time"

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
	// SendTimeout cuts an answer whose client has taken no byte of it for
	// this long (its pod request is cancelled, its slot freed). 0: none.
	SendTimeout time.Duration
	// Classes places requests into traffic classes; nil: none.
	Classes *Classes
	// Fair shares the queue between tenants within a priority; nil: none.
	Fair *Fairness
	// Quotas says token quotas apply: without it the core never asks
	// Options.Quotas (no lock, no hash on the request path).
	Quotas bool
	// QuotaShadow charges and counts token quotas but refuses nothing.
	QuotaShadow bool
	// Prefix asks for each request's prefix blocks (pod scoring's prefix
	// affinity, prefix.go): scoring is on with a prefix weight above 0.
	// Only a request that may go to more than one pod computes them.
	Prefix bool
	// ForwardPriority lists the upstreams whose forwarded bodies carry the
	// class as vLLM's "priority" field.
	ForwardPriority map[string]bool
}

// withDefaults fills in the zero fields.
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
