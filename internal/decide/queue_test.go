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

// The queue's Admission ends a wait when need's wait passes, as the
// deadline's context did before: context.DeadlineExceeded, the waiter
// gone from the queue.
func TestAdmissionWaitEnds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q, err := queue.New(queue.Settings{})
		if err != nil {
			t.Fatal(err)
		}
		q.SetWindow("pod", 1)
		a := Queue(q)
		held, err := a.Acquire(t.Context(), Need{Seqs: 1, wait: time.Second}, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release()
		start := time.Now()
		_, err = a.Acquire(t.Context(), Need{Seqs: 1, wait: 50 * time.Millisecond}, 0, nil)
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 50*time.Millisecond {
			t.Fatalf("Acquire on a full window with a wait of 50ms = %v after %v, want DeadlineExceeded after 50ms",
				err, time.Since(start))
		}
		if n := q.Stats().Length; n != 0 {
			t.Errorf("%d waiting after the wait ended, want 0", n)
		}
	})
}

// A request the queue's Admission grants at once costs the slot alone: its
// wait's context and timer are made only for a request that waits.
func TestAdmissionGrantedAtOnceMakesNoTimer(t *testing.T) {
	q, err := queue.New(queue.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	q.SetWindow("pod", 1)
	a := Queue(q)
	ctx, cancel := context.WithCancel(t.Context()) // a parent a timer's context would register with
	defer cancel()
	allocs := testing.AllocsPerRun(100, func() {
		s, err := a.Acquire(ctx, Need{Seqs: 1, wait: 30 * time.Second}, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.Release()
	})
	if allocs > 1 {
		t.Errorf("Acquire granted at once: %v allocations, want 1 (the slot)", allocs)
	}
}

// A request whose deadline passed before it reached the queue (its body
// took that long) is refused as one that waited until it, and the queue is
// not asked.
func TestDeadlinePassedBeforeTheQueue(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	r := newRig(t, Policy{MaxWait: time.Second})
	r.opts.Now = func() time.Time { return now }
	r.build()
	in := chat(chatBody, nil)
	in.Trace = clockTracer{advance: func() { now = now.Add(2 * time.Second) }}
	_, res := r.decide(t.Context(), in)
	if rf := res.Refusal; rf == nil || rf.Reason != ReasonQueueTimeout {
		t.Fatalf("Decide past max_wait before the queue = %+v, want queue_timeout", res)
	}
	if n := len(r.adm.needs); n != 0 {
		t.Errorf("the queue was asked %d times, want 0", n)
	}
}

// clockTracer moves the core's clock when the admission starts.
type clockTracer struct{ advance func() }

func (clockTracer) Routed(ctx context.Context, _ Route, _ bool) context.Context { return ctx }
func (c clockTracer) Admitting(ctx context.Context, _ *Request) context.Context {
	c.advance()
	return ctx
}
func (clockTracer) Admitted(context.Context, *Request, *Admitted, *Refusal) {}
