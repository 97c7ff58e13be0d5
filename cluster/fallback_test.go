package cluster

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestRedisRestart stops Redis mid-run and starts it again on the same port
// (empty: it persists nothing). The replica switches to local mode and back,
// telling OnChange once each way; Share keeps the last replica count; local
// leases are bounded by the share; after the restart its leases are in Redis
// again, released ones are not; a background load never sees a call outlast
// its timeout, and nothing panics.
func TestRedisRestart(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	const timeout = 200 * time.Millisecond
	var mu sync.Mutex
	var changes []bool
	s := Settings{Timeout: timeout, DownAfter: 2}
	replicas(t, r, 3, s) // three others: a makes four
	s.ReplicaID = "a"
	s.Replicas = 3
	s.OnChange = func(up bool) { mu.Lock(); changes = append(changes, up); mu.Unlock() }
	a := newCluster(t, r, s)
	ctx := t.Context()
	if err := a.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if !a.Up() || a.LastReplicas() != 4 || a.Share(40) != 10 {
		t.Fatalf("Up() = %v, LastReplicas() = %d, Share(40) = %v; want true, 4, 10", a.Up(), a.LastReplicas(), a.Share(40))
	}
	lim, err := a.NewLimiter(LimiterSettings{QPS: 1000, Burst: 1000})
	if err != nil {
		t.Fatal(err)
	}
	shared := make([]Lease, 2)
	for i := range shared {
		l, ok, err := a.Acquire(ctx, "p", 20)
		if !ok || err != nil {
			t.Fatalf("Acquire() = %v, %v", ok, err)
		}
		shared[i] = l
	}

	// Background load: every call returns within its timeout, whatever the mode.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				start := time.Now()
				if _, err := lim.Allow(loadCtx, "k"); err != nil && !errors.Is(err, ErrUnavailable) && loadCtx.Err() == nil {
					t.Errorf("Allow: %v", err)
				}
				l, ok, _ := a.Acquire(loadCtx, "q", 5)
				if ok {
					a.Release(loadCtx, l)
				}
				if d := time.Since(start); d > 2*timeout+200*time.Millisecond {
					t.Errorf("Allow and Acquire took %v, want within 2 × timeout %v", d, timeout)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	defer func() { stopLoad(); wg.Wait() }()

	r.stop()
	for i := 0; a.Up(); i++ {
		if i > 100 {
			t.Fatal("still Up after 100 failed calls")
		}
		start := time.Now()
		if _, err := lim.Allow(ctx, ""); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Allow() with Redis stopped = %v, want ErrUnavailable", err)
		}
		if d := time.Since(start); d > timeout+200*time.Millisecond {
			t.Fatalf("Allow() took %v, want within Timeout %v", d, timeout)
		}
	}
	if err := a.Beat(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Beat() with Redis stopped = %v, want ErrUnavailable", err)
	}
	if a.Up() || a.Share(40) != 10 {
		t.Fatalf("Up() = %v, Share(40) = %v with Redis stopped; want false, 10 (the last count, 4)", a.Up(), a.Share(40))
	}
	// Local window: ⌊20 / 4⌋ = 5 slots, the 2 shared ones included.
	var local []Lease
	for {
		l, ok, err := a.Acquire(ctx, "p", 20)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		local = append(local, l)
	}
	if len(local) != 3 {
		t.Fatalf("local mode admitted %d more leases beside 2 shared ones, want 3 (share 5)", len(local))
	}
	a.Release(ctx, shared[0]) // in Redis: pending until Redis is back
	a.Release(ctx, local[0])  // never in Redis: nothing to do

	r.start()
	for deadline := time.Now().Add(15 * time.Second); a.Beat(ctx) != nil; {
		if time.Now().After(deadline) {
			t.Fatal("Beat() still failing 15s after Redis restarted")
		}
		time.Sleep(50 * time.Millisecond) // waiting on a restarted server; bounded
	}
	stopLoad()
	wg.Wait()
	if !a.Up() {
		t.Fatal("Up() = false after a successful Beat")
	}
	mu.Lock()
	got := slices.Clone(changes)
	mu.Unlock()
	if want := []bool{true, false, true}; !slices.Equal(got, want) {
		t.Fatalf("OnChange calls = %v, want %v", got, want)
	}
	// Redis restarted empty; the heartbeat wrote back what a holds: shared[1]
	// and local[1:], not the two released.
	if n, err := a.Count(ctx, "p"); err != nil || n != 3 {
		t.Fatalf("Count() = %d, %v after the restart, want 3", n, err)
	}
	if s := a.Snapshot(); s.PendingReleases != 0 || s.Held["p"] != 3 || s.Replicas != 1 {
		t.Fatalf("Snapshot() = %+v, want 3 held in p, nothing pending, 1 replica", s)
	}
	for _, l := range append(local[1:], shared[1]) {
		a.Release(ctx, l)
	}
	if n, err := a.Count(ctx, "p"); err != nil || n != 0 {
		t.Fatalf("Count() = %d, %v after releasing all, want 0", n, err)
	}
	if _, err := lim.Allow(ctx, ""); err != nil {
		t.Fatalf("Allow() after the restart = %v", err)
	}
}

// TestReleasePendingFlush: a lease whose release could not reach Redis is
// removed by the next heartbeat, not left to its TTL.
func TestReleasePendingFlush(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	clock := newFakeClock()
	a := replicas(t, r, 1, Settings{Now: clock.Now, DownAfter: 1})[0]
	ctx := t.Context()
	l, ok, err := a.Acquire(ctx, "p", 1)
	if !ok || err != nil {
		t.Fatalf("Acquire() = %v, %v", ok, err)
	}
	a.up.Store(false) // as if a call had just failed
	a.Release(ctx, l)
	if n, _ := a.Count(ctx, "p"); n != 1 || a.Snapshot().PendingReleases != 1 {
		t.Fatalf("Count() = %d, pending %d, want the lease still in Redis and pending", n, a.Snapshot().PendingReleases)
	}
	if err := a.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := a.Count(ctx, "p"); n != 0 || a.Snapshot().PendingReleases != 0 {
		t.Fatalf("Count() = %d, pending %d after Beat, want 0, 0", n, a.Snapshot().PendingReleases)
	}
}

// TestUnreachableFromStart: a Cluster whose Redis never answers stays in
// local mode, answers at once, and never calls OnChange.
func TestUnreachableFromStart(t *testing.T) {
	t.Parallel()
	called := false
	c, err := New(Settings{URL: "redis://127.0.0.1:1/0", Replicas: 2, OnChange: func(bool) { called = true }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Beat(t.Context()); !errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Beat() = %v, want ErrUnavailable only", err)
	}
	if _, err := c.Count(t.Context(), "p"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Count() = %v, want ErrUnavailable", err)
	}
	if c.Up() || called || c.Share(10) != 5 {
		t.Fatalf("Up() = %v, OnChange called %v, Share(10) = %v; want false, false, 5", c.Up(), called, c.Share(10))
	}
	l, ok, err := c.Acquire(t.Context(), "p", 1) // share ⌊1/2⌋ → at least 1
	if !ok || err != nil {
		t.Fatalf("Acquire() = %v, %v, want the one local slot", ok, err)
	}
	if _, ok, _ := c.Acquire(t.Context(), "p", 1); ok {
		t.Fatal("second Acquire() succeeded beyond the local share")
	}
	c.Release(t.Context(), l)
	if s := c.Snapshot(); s.PendingReleases != 0 || len(s.Held) != 0 {
		t.Fatalf("Snapshot() = %+v, want nothing held or pending", s)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, _, err := c.Acquire(ctx, "p", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire(cancelled) = %v, want context.Canceled", err)
	}
	if _, _, err := c.Acquire(t.Context(), "", 1); err == nil {
		t.Fatal("Acquire(empty pod) = nil error")
	}
}
