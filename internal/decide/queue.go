package decide

import (
	"context"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// Queue fits the admission queue to Admission, turning its errors into the
// core's sentinels by the table admissionErrors (RetryAfter and the rest of
// the queue's error kept).
func Queue(q *queue.Queue) Admission { return queueAdmission{q} }

type queueAdmission struct{ q *queue.Queue }

// Acquire is the queue's Acquire with need's wait on ctx, made only for a
// request that waits (Queue.Enter): a context with a deadline costs a
// timer and three allocations, which most requests, granted at once, need
// not pay.
func (a queueAdmission) Acquire(ctx context.Context, need Need, priority int, exclude []string) (Slot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, w, err := a.q.Enter(queue.Request{Seqs: need.Seqs, Tokens: need.tokens, Memory: need.memory, Exclude: exclude,
		Priority: priority, Deadline: need.deadline, Tenant: need.tenant, Weight: need.weight, Service: need.Service,
		Prefix: need.prefix})
	if err == nil && s == nil {
		s, err = waitFor(ctx, w, need.wait)
	}
	if err != nil {
		return nil, queueError(err)
	}
	return s, nil
}

func (a queueAdmission) TryAcquire(need Need, exclude []string) Slot {
	if s := a.q.TryAcquire(queue.Request{Seqs: need.Seqs, Tokens: need.tokens, Memory: need.memory, Exclude: exclude,
		Tenant: need.tenant, Weight: need.weight, Service: need.Service, Prefix: need.prefix}); s != nil {
		return s
	}
	return nil // not a nil *queue.Slot in a non-nil interface
}

func (a queueAdmission) Dispatch() { a.q.Dispatch() }

// waitFor waits as w until ctx ends or, when wait is positive, wait passes.
func waitFor(ctx context.Context, w queue.Waiter, wait time.Duration) (*queue.Slot, error) {
	if wait <= 0 {
		return w.Wait(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return w.Wait(ctx)
}
