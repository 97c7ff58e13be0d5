package decide

import (
	"context"

	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// Queue fits the admission queue to Admission, turning its errors into the
// core's sentinels by the table admissionErrors (RetryAfter and the rest of
// the queue's error kept).
func Queue(q *queue.Queue) Admission { return queueAdmission{q} }

type queueAdmission struct{ q *queue.Queue }

func (a queueAdmission) Acquire(ctx context.Context, need Need, priority int, exclude []string) (Slot, error) {
	s, err := a.q.Acquire(ctx, queue.Request{Seqs: need.Seqs, Tokens: need.tokens, Memory: need.memory, Exclude: exclude,
		Priority: priority, Deadline: need.deadline, Tenant: need.tenant, Weight: need.weight, Service: need.Service,
		Prefix: need.prefix})
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
