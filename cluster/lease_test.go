package cluster

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLeasesConcurrent: three replicas, one pod, limit 20. 200 concurrent
// Acquire calls take exactly 20 slots; then 200 goroutines churn (acquire,
// hold, release) and never hold more than 20 at once; at the end every slot
// is free.
func TestLeasesConcurrent(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	cs := replicas(t, r, 3, Settings{})
	const limit, workers = 20, 200
	ctx := t.Context()

	var mu sync.Mutex
	var taken []struct {
		c *Cluster
		l Lease
	}
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			c := cs[i%3]
			l, ok, err := c.Acquire(ctx, "pod", limit)
			if err != nil {
				t.Errorf("Acquire: %v", err)
			}
			if ok {
				mu.Lock()
				taken = append(taken, struct {
					c *Cluster
					l Lease
				}{c, l})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(taken) != limit {
		t.Fatalf("%d of %d concurrent Acquire calls succeeded, want %d", len(taken), workers, limit)
	}
	if n, err := cs[0].Count(ctx, "pod"); err != nil || n != limit {
		t.Fatalf("Count() = %d, %v, want %d", n, err, limit)
	}
	for _, x := range taken {
		x.c.Release(ctx, x.l)
	}

	var live, peak, acquired atomic.Int64
	for i := range workers {
		wg.Go(func() {
			c := cs[i%3]
			for range 5 {
				for try := 0; ; try++ {
					l, ok, err := c.Acquire(ctx, "pod", limit)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					if !ok {
						if try > 10000 {
							t.Errorf("no slot after %d tries", try)
							return
						}
						runtime.Gosched()
						continue
					}
					n := live.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					acquired.Add(1)
					time.Sleep(time.Millisecond) // the request runs
					live.Add(-1)                 // before Release: live never exceeds what Redis counts
					c.Release(ctx, l)
					break
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d leases taken, at most %d at once", acquired.Load(), peak.Load())
	if p := peak.Load(); p > limit || p < limit/2 {
		t.Fatalf("%d leases live at once, want ≤ %d (and the window used: ≥ %d)", p, limit, limit/2)
	}
	for _, c := range cs {
		if !c.Up() {
			t.Fatalf("%s fell back to local mode; the bound above is the shared one", c.ReplicaID())
		}
		if s := c.Snapshot(); len(s.Held) != 0 || s.PendingReleases != 0 {
			t.Fatalf("%s: Snapshot() = %+v after releasing everything", c.ReplicaID(), s)
		}
	}
	if n, err := cs[0].Count(ctx, "pod"); err != nil || n != 0 {
		t.Fatalf("Count() = %d, %v at the end, want 0", n, err)
	}
}

// TestLeaseSteps drives leases on a fake clock: a replica that keeps beating
// keeps its slots past LeaseTTL; one that stops frees them after exactly
// LeaseTTL; a release frees at once; a second release does nothing.
func TestLeaseSteps(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	clock := newFakeClock()
	const ttl = 10 * time.Second
	cs := replicas(t, r, 2, Settings{Now: clock.Now, LeaseTTL: ttl})
	a, b := cs[0], cs[1]
	ctx := t.Context()
	acquire := func(c *Cluster, want bool) Lease {
		t.Helper()
		l, ok, err := c.Acquire(ctx, "pod", 3)
		if err != nil || ok != want {
			t.Fatalf("%s: Acquire() = %v, %v, want %v", c.ReplicaID(), ok, err, want)
		}
		return l
	}
	count := func(want int) {
		t.Helper()
		if n, err := a.Count(ctx, "pod"); err != nil || n != want {
			t.Fatalf("Count() = %d, %v, want %d", n, err, want)
		}
	}
	la := acquire(a, true)
	acquire(b, true)
	acquire(b, true)
	acquire(a, false) // 3 of 3
	count(3)
	clock.Advance(ttl / 2)
	if err := a.Beat(ctx); err != nil { // a renews; b has "crashed"
		t.Fatal(err)
	}
	clock.Advance(ttl/2 - time.Millisecond)
	count(3) // b's leases live until exactly ttl
	acquire(a, false)
	clock.Advance(time.Millisecond)
	count(1) // b's expired; a's renewed one lives
	acquire(a, true)
	clock.Advance(ttl)
	count(0) // a stopped beating too
	lb := acquire(a, true)
	a.Release(ctx, lb)
	a.Release(ctx, lb)
	a.Release(ctx, Lease{})
	count(0)
	if _, ok := a.Snapshot().Held["pod"]; !ok {
		t.Fatalf("Snapshot().Held lost the leases a never released")
	}
	a.Release(ctx, la)
}

// TestLeaseExpiresOnRedisClock: a replica that stops renewing ("crashed")
// frees its slots within LeaseTTL on Redis's own clock, while a replica
// running its loop keeps its slot beyond LeaseTTL. Bounded waits only.
func TestLeaseExpiresOnRedisClock(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	rc := r.client()
	const ttl = 400 * time.Millisecond
	cs := replicas(t, r, 2, Settings{LeaseTTL: ttl})
	a, b := cs[0], cs[1]
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := a.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	defer func() { cancel(); wg.Wait() }()

	la, ok, err := a.Acquire(ctx, "pod", 4)
	if !ok || err != nil {
		t.Fatalf("Acquire() = %v, %v", ok, err)
	}
	for range 3 {
		if _, ok, err := b.Acquire(ctx, "pod", 4); !ok || err != nil {
			t.Fatalf("Acquire() = %v, %v", ok, err)
		}
	}
	crashed := r.redisNow(ctx, rc) // b writes nothing from here on
	if _, ok, _ := a.Acquire(ctx, "pod", 4); ok {
		t.Fatal("Acquire() beyond the limit succeeded")
	}
	var freedAfter time.Duration
	for deadline := time.Now().Add(10 * ttl); ; {
		if n, err := a.Count(ctx, "pod"); err == nil && n == 1 {
			freedAfter = r.redisNow(ctx, rc).Sub(crashed)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b's slots still taken after %v", 10*ttl)
		}
		time.Sleep(10 * time.Millisecond) // polling a real clock, bounded above
	}
	t.Logf("b's slots freed %v after its last write (LeaseTTL %v)", freedAfter, ttl)
	if freedAfter > ttl+100*time.Millisecond {
		t.Fatalf("b's slots freed %v after its last write, want within LeaseTTL %v (+100ms polling)", freedAfter, ttl)
	}
	// a's lease is older than ttl by now and still live: Run renewed it.
	time.Sleep(ttl / 2) // a real lease time must pass; bounded
	if n, err := a.Count(ctx, "pod"); err != nil || n != 1 {
		t.Fatalf("Count() = %d, %v, want a's renewed lease", n, err)
	}
	a.Release(ctx, la)
	cancel()
	wg.Wait()
	// Run withdrew a's announcement: only b (announced at the start) or
	// nobody is left.
	if n, err := b.Replicas(t.Context()); err != nil || n > 1 {
		t.Fatalf("Replicas() = %d, %v after a left, want ≤ 1", n, err)
	}
	if err := a.Run(t.Context()); err == nil {
		t.Fatal("second Run() = nil, want an error")
	}
}
