package queue

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkAcquireRelease is the proxy's hot path with a free slot.
func BenchmarkAcquireRelease(b *testing.B) {
	q, _ := New(Settings{})
	q.SetWindow("a", 256)
	q.SetWindow("b", 256)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s, err := q.Acquire(ctx, Request{Tokens: 300})
		if err != nil {
			b.Fatal(err)
		}
		s.Release()
	}
}

func BenchmarkAcquireReleaseParallel(b *testing.B) {
	q, _ := New(Settings{})
	q.SetWindow("a", 1<<20)
	q.SetWindow("b", 1<<20)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s, err := q.Acquire(ctx, Request{Tokens: 300})
			if err != nil {
				b.Error(err)
				return
			}
			s.Release()
		}
	})
}

// BenchmarkCoreEnqueueRelease keeps 10 000 waiters queued behind one full
// slot; each op queues one more and releases the slot, which dispatches one.
// The deadline cases give every request a far deadline, so each enqueue
// predicts its wait (a pass over the waiters) and none is refused.
func BenchmarkCoreEnqueueRelease(b *testing.B) {
	for _, tc := range []struct {
		order    Order
		deadline bool
	}{{FIFO, false}, {ShortestFirst, false}, {ShortestFirst, true}, {EarliestDeadline, true}} {
		name := tc.order.String()
		if tc.deadline {
			name += "+deadline"
		}
		b.Run(name, func(b *testing.B) {
			c, _ := NewCore(Settings{MaxLength: 20_000, MaxTokens: 1 << 40})
			c.SetWindow("a", 1)
			c.SetOrder(tc.order)
			r := rand.New(rand.NewPCG(1, 2))
			now := t0
			var id uint64
			enq := func() {
				id++
				req := Request{ID: id, Tokens: r.Int64N(8000)}
				if tc.deadline {
					req.Deadline = now.Add(24 * time.Hour)
				}
				if _, _, err := c.Enqueue(now, req); err != nil {
					b.Fatal(err)
				}
			}
			for range 10_001 {
				enq() // the first takes the slot
			}
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Millisecond)
				enq()
				if g := c.Release(now, "a", Cost{}); len(g) != 1 {
					b.Fatalf("Release() = %v, want one grant", g)
				}
			}
		})
	}
}

// BenchmarkCoreWaiterMemory measures what one waiting request costs in Core:
// B/op is bytes per queued waiter (heaps and index growth included), in
// batches of 10 000 waiters per Core.
func BenchmarkCoreWaiterMemory(b *testing.B) {
	var c *Core
	b.ReportAllocs()
	for i := range b.N {
		if i%10_000 == 0 {
			c, _ = NewCore(Settings{MaxLength: 10_000, MaxTokens: 1 << 40})
		}
		c.Enqueue(t0, Request{ID: uint64(i), Tokens: 300})
	}
}

// BenchmarkQueueWaiterMemory is the same through Queue: the Core's share plus
// the waiter's channel and registry entry. The waiting goroutine's stack is
// the caller's (the HTTP handler's) and is not counted.
func BenchmarkQueueWaiterMemory(b *testing.B) {
	var q *Queue
	b.ReportAllocs()
	for i := range b.N {
		if i%10_000 == 0 {
			q, _ = New(Settings{MaxLength: 10_000, MaxTokens: 1 << 40})
		}
		if _, _, ch, _ := q.enqueue(t0, Request{Tokens: 300}); ch == nil {
			b.Fatal("enqueue() granted, want a waiter")
		}
	}
}
