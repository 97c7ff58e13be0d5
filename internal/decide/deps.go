package decide

import (
	"context"
	"errors"
	"time"
)

// Limiter is the fast breaker. Allow returns nil to admit, or an error that
// implements RetryAfter() time.Duration to refuse with 429. A call that asks
// another process (the cluster's Redis) ends when ctx does: ctx is the
// request's.
type Limiter interface {
	Allow(ctx context.Context, clientKey string) error
}

// TenantLimiter is a Limiter that shares its global bucket between tenants
// (breaker.Limiter with shares). With fairness on, the core asks
// AllowTenant, with the request's tenant as the queue knows it (a named
// tenant's name, an unnamed one's "sha256:" key, "" without a tenant
// value), instead of Allow.
type TenantLimiter interface {
	AllowTenant(ctx context.Context, clientKey, tenant string) error
}

// Need is what a request asks of a pod's window, from its classification:
// its sequences (classify.Request.Sequences: the window's slots count vLLM
// sequences), and its estimated tokens and memory (Estimated and Memory).
type Need struct {
	Seqs           int
	tokens, memory int64
	// deadline, if set, is the latest start still of use to the client (its
	// time-to-first-token deadline): Acquire fails with ErrDeadline at once
	// when the queue predicts it cannot start by then.
	deadline time.Time
	// wait, if positive, is how long Acquire may wait for the slots: the
	// core sets the time left to deadline, on its clock, when it calls
	// Acquire (and refuses a request with none left itself). 0: until ctx
	// ends.
	wait time.Duration
	// tenant, Weight and Service place it in the queue's fair share: its
	// tenant, the tenant's weight and its estimated service in weighted
	// tokens, charged to the tenant when it is granted ("", 0, 0: none).
	tenant  string
	weight  float64
	Service int64
	// prefix is its prompt's prefix blocks (Request.Prefix): the queue's
	// pod scoring.
	prefix []uint64
}

// Admission hands out window slots on upstreams, queueing when none is free.
type Admission interface {
	// Acquire returns need's slots on an available upstream not named in
	// exclude, waiting until they free up, ctx ends, or need's wait passes
	// (context.DeadlineExceeded); the timer for need's wait is made only
	// when the request has to wait. Errors: ErrQueueFull, ErrDraining,
	// ErrNoUpstream (each wrapped), ctx's error or context.DeadlineExceeded.
	Acquire(ctx context.Context, need Need, priority int, exclude []string) (Slot, error)
	// TryAcquire returns need's slots on an upstream not named in exclude
	// that has room now, or nil: it never waits (the one retry of a refused
	// request).
	TryAcquire(need Need, exclude []string) Slot
	// Dispatch asks the queue to look at every upstream's Availability
	// again (after a health check changed a pod's state).
	Dispatch()
}

// Slot is what a request holds of an upstream's batch window (its
// sequences' slots). Release it exactly once.
type Slot interface {
	Upstream() string
	// Settle corrects the service the slot charged its tenant to actual
	// (weighted tokens from the pod's usage); at most once.
	Settle(actual int64)
	Release()
}

// Sentinel errors that adapters wrap so the core can branch with errors.Is.
var (
	// ErrQueueFull means the admission queue is at its length or token bound.
	ErrQueueFull = errors.New("queue full")
	// ErrDraining means the process is shutting down and takes no new work.
	ErrDraining = errors.New("draining")
	// ErrNoUpstream means no upstream can take the request at all (every
	// one it may use is Down).
	ErrNoUpstream = errors.New("no upstream available")
	// errTooLarge means the request's estimated tokens exceed what the queue
	// can ever hold (queue.max_tokens): no wait or retry admits it.
	errTooLarge = errors.New("request larger than the queue can hold")
	// errNoMemory means the request's estimated transient memory (its
	// sampler, prompt_logprobs) exceeds what every pod it may use reports
	// free for it (memory admission): it would not fit even on an idle pod.
	errNoMemory = errors.New("request needs more memory than any upstream has free")
	// errDeadline means the request cannot start before its deadline (the
	// work ahead of it takes longer); the wrapped error may say when to
	// come back (RetryAfter).
	errDeadline = errors.New("cannot start before its deadline")
)
