package queue

import (
	"errors"
	"fmt"
)

// Errors returned by Enqueue and Acquire. Callers branch with errors.Is.
var (
	// ErrFull means the queue holds MaxLength waiters. It is also the parent
	// of ErrTokensFull, so errors.Is(err, ErrFull) covers both bounds.
	ErrFull = errors.New("queue: full")
	// ErrTokensFull means the waiters' estimated tokens plus the request's
	// would exceed MaxTokens. errors.Is(ErrTokensFull, ErrFull) is true.
	ErrTokensFull = fmt.Errorf("%w: estimated tokens", ErrFull)
	// ErrTooLarge means the request alone estimates more tokens than
	// MaxTokens: it can never be queued, so retrying will not help.
	ErrTooLarge = errors.New("queue: request larger than max tokens")
	// ErrDuplicateID means Core.Enqueue got the ID of a request that is still
	// waiting. Queue assigns its own IDs and never returns it.
	ErrDuplicateID = errors.New("queue: duplicate request id")
	// ErrClosed is what waiters get from Queue.Drain(nil), and what Acquire
	// returns once the queue has been drained.
	ErrClosed = errors.New("queue: closed")
	// ErrUnavailable means every upstream the request may use is Down (see
	// Availability): refused at once rather than held to its deadline.
	ErrUnavailable = errors.New("queue: no upstream can take the request")
	// ErrNoMemory means the request's Memory exceeds the whole memory budget
	// of every upstream it may use: it would not fit even on an idle pod as
	// the pods report their free memory now. Refused at once; retrying later
	// may succeed once a pod reports more free memory.
	ErrNoMemory = errors.New("queue: request needs more memory than any upstream has free")
	// ErrDeadline means the request could not start before its Deadline:
	// the work ahead of it, at the rate its upstreams give slots back,
	// takes longer. Enqueue returns it as a *DeadlineError with the wait.
	ErrDeadline = errors.New("queue: cannot start before its deadline")
)
