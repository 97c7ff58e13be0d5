package queue

import (
	"context"
	"fmt"
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

// BenchmarkAcquireReleaseTenants is the same hot path with every request
// for a tenant, round robin over 1 or 1000 of them: each grant lifts and
// charges its tenant, each release moves it to the idle heap and back.
func BenchmarkAcquireReleaseTenants(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprint(n, "tenants"), func(b *testing.B) {
			q, _ := New(Settings{})
			q.SetWindow("a", 256)
			q.SetWindow("b", 256)
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprint("tenant-", i)
			}
			ctx := context.Background()
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				s, err := q.Acquire(ctx, Request{Tokens: 300, Tenant: names[i%n], Service: 900})
				if err != nil {
					b.Fatal(err)
				}
				s.Settle(600)
				s.Release()
				i++
			}
		})
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
// predicts its wait (a pass over the waiters) and none is refused. The
// tenants cases spread the requests over 1000 tenants, each backlogged.
func BenchmarkCoreEnqueueRelease(b *testing.B) {
	for _, tc := range []struct {
		order    Order
		deadline bool
		tenants  int
	}{{FIFO, false, 0}, {ShortestFirst, false, 0}, {ShortestFirst, true, 0}, {EarliestDeadline, true, 0},
		{FIFO, false, 1000}, {ShortestFirst, false, 1000}} {
		name := tc.order.String()
		if tc.deadline {
			name += "+deadline"
		}
		if tc.tenants > 0 {
			name += fmt.Sprintf("+%dtenants", tc.tenants)
		}
		b.Run(name, func(b *testing.B) {
			c, _ := NewCore(Settings{MaxLength: 20_000, MaxTokens: 1 << 40})
			c.SetWindow("a", 1)
			c.SetOrder(tc.order)
			r := rand.New(rand.NewPCG(1, 2))
			now := t0
			var id uint64
			tenantNames := make([]string, tc.tenants)
			for i := range tenantNames {
				tenantNames[i] = fmt.Sprint("tenant-", i)
			}
			enq := func() {
				id++
				req := Request{ID: id, Tokens: r.Int64N(8000)}
				if tc.tenants > 0 {
					req.Tenant, req.Service = tenantNames[id%uint64(tc.tenants)], req.Tokens
				}
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

// BenchmarkStatsTenants is a snapshot with MaxTenants (10 000) idle tenants
// remembered and 100 backlogged: what cmd/gatekeeper holds the queue's lock
// for each pressure round.
func BenchmarkStatsTenants(b *testing.B) {
	c, _ := NewCore(Settings{})
	c.SetWindow("a", 1)
	for i := range defaultMaxTenants {
		g, _, _ := c.Enqueue(t0, Request{ID: uint64(i), Tenant: fmt.Sprint("idle-", i), Service: int64(i)})
		c.Release(t0, g.Upstream, g.Cost)
	}
	c.Enqueue(t0, Request{ID: 1 << 40, Tenant: "running"})
	for i := range 100 {
		c.Enqueue(t0, Request{ID: 1<<40 + 1 + uint64(i), Tenant: fmt.Sprint("waiting-", i)})
	}
	b.ReportAllocs()
	for b.Loop() {
		if s := c.Stats(); len(s.Tenants) != maxTenantStats {
			b.Fatalf("Stats() lists %d tenants", len(s.Tenants))
		}
	}
}
