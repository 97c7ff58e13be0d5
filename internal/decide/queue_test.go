package decide

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// The queue's Admission passes a request's deadline to the queue, and the
// queue's refusal reaches the core as ErrDeadline with the predicted wait
// as its Retry-After.
func TestAdmissionPassesDeadlines(t *testing.T) {
	t.Parallel()
	synctest.Test(t, admissionPassesDeadlines)
}

func admissionPassesDeadlines(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	q, err := queue.New(queue.Settings{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	q.SetWindow("pod", 1)
	a := Queue(q)
	ctx := t.Context()
	for range 10 { // ten slots given back within a second: 10 a second
		s, err := a.Acquire(ctx, Need{Seqs: 1}, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		now = now.Add(100 * time.Millisecond)
		s.Release()
	}
	held, err := a.Acquire(ctx, Need{Seqs: 1}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	waiting, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := a.Acquire(waiting, Need{Seqs: 1}, 0, nil); done <- err }()
	synctest.Wait() // it waits in the queue
	if n := q.Stats().Length; n != 1 {
		t.Fatalf("%d waiting, want the second request", n)
	}
	_, err = a.Acquire(ctx, Need{Seqs: 1, deadline: now.Add(100 * time.Millisecond)}, 0, nil)
	var ra interface{ RetryAfter() time.Duration }
	if !errors.Is(err, errDeadline) || !errors.As(err, &ra) || ra.RetryAfter() != 200*time.Millisecond {
		t.Fatalf("Acquire with a deadline 100 ms ahead behind one waiter at 10/s = %v, want ErrDeadline with a wait of 200ms", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter = %v, want canceled", err)
	}
}
