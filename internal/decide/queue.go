package decide

import (
	"context"
	"errors"
	"fmt"

	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// Queue fits the admission queue to Admission, turning its errors into the
// core's sentinels (RetryAfter and the rest of the queue's error kept).
func Queue(q *queue.Queue) Admission { return queueAdmission{q} }

type queueAdmission struct{ q *queue.Queue }

func (a queueAdmission) Acquire(ctx context.Context, need Need, priority int, exclude []string) (Slot, error) {
	s, err := a.q.Acquire(ctx, queue.Request{Seqs: need.Seqs, Tokens: need.Tokens, Memory: need.Memory, Exclude: exclude,
		Priority: priority, Deadline: need.Deadline, Tenant: need.Tenant, Weight: need.Weight, Service: need.Service})
	switch {
	case err == nil:
		return s, nil
	case errors.Is(err, queue.ErrDeadline):
		return nil, fmt.Errorf("%w: %w", ErrDeadline, err)
	case errors.Is(err, queue.ErrTooLarge):
		return nil, fmt.Errorf("%w: %w", ErrTooLarge, err)
	case errors.Is(err, queue.ErrFull):
		return nil, fmt.Errorf("%w: %w", ErrQueueFull, err)
	case errors.Is(err, queue.ErrClosed):
		return nil, fmt.Errorf("%w: %w", ErrDraining, err)
	case errors.Is(err, queue.ErrUnavailable):
		return nil, fmt.Errorf("%w: %w", ErrNoUpstream, err)
	case errors.Is(err, queue.ErrNoMemory):
		return nil, fmt.Errorf("%w: %w", ErrNoMemory, err)
	}
	return nil, err
}

func (a queueAdmission) TryAcquire(need Need, exclude []string) Slot {
	if s := a.q.TryAcquire(queue.Request{Seqs: need.Seqs, Tokens: need.Tokens, Memory: need.Memory, Exclude: exclude,
		Tenant: need.Tenant, Weight: need.Weight, Service: need.Service}); s != nil {
		return s
	}
	return nil // not a nil *queue.Slot in a non-nil interface
}

func (a queueAdmission) Dispatch() { a.q.Dispatch() }
