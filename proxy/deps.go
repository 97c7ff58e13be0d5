package proxy

import (
	"context"
	"errors"
	"time"
)

// Limiter is the fast breaker. Allow returns nil to admit, or an error that
// implements RetryAfter() time.Duration to refuse with 429.
type Limiter interface {
	Allow(clientKey string) error
}

// Need is what a request asks of a pod's window, from its classification:
// its sequences (classify.Request.Sequences: the window's slots count vLLM
// sequences), and its estimated tokens and memory (Estimated and Memory).
type Need struct {
	Seqs           int
	Tokens, Memory int64
	// Deadline, if set, is the latest start still of use to the client (its
	// time-to-first-token deadline): Acquire fails with ErrDeadline at once
	// when the queue predicts it cannot start by then.
	Deadline time.Time
}

// Admission hands out window slots on upstreams, queueing when none is free.
type Admission interface {
	// Acquire returns need's slots on an available upstream not named in
	// exclude, waiting until they free up or ctx ends. Errors: ErrQueueFull,
	// ErrDraining, ErrNoUpstream (each wrapped) or ctx's error.
	Acquire(ctx context.Context, need Need, priority int, exclude []string) (Slot, error)
	// TryAcquire returns need's slots on an upstream not named in exclude
	// that has room now, or nil: it never waits (the one retry of a refused
	// request).
	TryAcquire(need Need, exclude []string) Slot
	// Dispatch asks the queue to look at every upstream's Availability
	// again (after a health check changed a pod's state).
	Dispatch()
}

// Levels reports the pressure level of each upstream (the slow breaker).
type Levels interface {
	// Critical reports whether the upstream must take no new work.
	Critical(upstream string) bool
	// Degraded reports whether the upstream is degraded or worse: sheddable
	// traffic classes are refused while every pod is.
	Degraded(upstream string) bool
}

// Slot is what a request holds of an upstream's batch window (its
// sequences' slots). Release it exactly once.
type Slot interface {
	Upstream() string
	Release()
}

// Gate is the per-upstream error breaker. When err is nil the caller must call
// done exactly once with the request's result.
type Gate interface {
	Allow() (done func(Result), err error)
	// State says whether Allow would admit a request now. It may move the
	// breaker from open to half-open when its open time has passed, so it is
	// what makes a pod available again; it must not block.
	State() GateState
	// OpenRemaining is how long an open breaker still refuses before it
	// lets a probe through (the Retry-After of a client refused for it); 0
	// when it is not open. It must not block.
	OpenRemaining() time.Duration
}

// GateState is what a Gate would do with a request now.
type GateState int

// Gate states.
const (
	// GateReady: closed, or half-open with a probe free.
	GateReady GateState = iota
	// GateProbing: half-open and every probe is out: wait for the verdict.
	GateProbing
	// GateOpen: the pod failed recently; refused until the open time ends.
	GateOpen
)

// Result is what a finished request tells its upstream's error breaker.
type Result int

// Results reported to a Gate.
const (
	// Success: the pod answered below 500.
	Success Result = iota
	// Failure: connection error, timeout, or a 5xx from the pod.
	Failure
	// Excluded: the client left; the pod is neither blamed nor credited.
	Excluded
)

// Sentinel errors that adapters wrap so proxy can branch with errors.Is.
var (
	// ErrQueueFull means the admission queue is at its length or token bound.
	ErrQueueFull = errors.New("proxy: queue full")
	// ErrDraining means the process is shutting down and takes no new work.
	ErrDraining = errors.New("proxy: draining")
	// ErrNoUpstream means no upstream can take the request at all (every
	// one it may use is Down).
	ErrNoUpstream = errors.New("proxy: no upstream available")
	// ErrTooLarge means the request's estimated tokens exceed what the queue
	// can ever hold (queue.max_tokens): no wait or retry admits it.
	ErrTooLarge = errors.New("proxy: request larger than the queue can hold")
	// ErrNoMemory means the request's estimated transient memory (its
	// sampler, prompt_logprobs) exceeds what every pod it may use reports
	// free for it (memory admission): it would not fit even on an idle pod.
	ErrNoMemory = errors.New("proxy: request needs more memory than any upstream has free")
	// ErrDeadline means the request cannot start before its deadline (the
	// work ahead of it takes longer); the wrapped error may say when to
	// come back (RetryAfter).
	ErrDeadline = errors.New("proxy: cannot start before its deadline")
)
