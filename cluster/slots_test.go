package cluster

import (
	"testing"
)

// TestAcquireNShared: a request of n sequences takes n slots of the shared
// window at once, over every replica: it fits beside the live slots or
// waits; one above the whole window runs alone; Release frees all n, and
// a heartbeat renews them all.
func TestAcquireNShared(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	cs := replicas(t, r, 2, Settings{})
	a, b := cs[0], cs[1]
	ctx := t.Context()

	la, ok, err := a.AcquireN(ctx, "pod", 8, 6)
	if !ok || err != nil {
		t.Fatalf("AcquireN(6 of 8) = %v, %v", ok, err)
	}
	if _, ok, _ := b.AcquireN(ctx, "pod", 8, 4); ok {
		t.Fatal("AcquireN(4) beside 6 of 8 succeeded")
	}
	lb, ok, err := b.AcquireN(ctx, "pod", 8, 2)
	if !ok || err != nil {
		t.Fatalf("AcquireN(2) beside 6 of 8 = %v, %v", ok, err)
	}
	if n, err := a.Count(ctx, "pod"); err != nil || n != 8 {
		t.Fatalf("Count() = %d, %v, want 8", n, err)
	}
	if err := a.Beat(ctx); err != nil { // rewrites a's six members, adds none
		t.Fatal(err)
	}
	if n, _ := a.Count(ctx, "pod"); n != 8 || a.Snapshot().Held["pod"] != 6 {
		t.Fatalf("after a heartbeat: Count() = %d, held %v, want 8 and 6", n, a.Snapshot().Held)
	}
	a.Release(ctx, la)
	b.Release(ctx, lb)
	if n, _ := a.Count(ctx, "pod"); n != 0 {
		t.Fatalf("Count() = %d after the releases, want 0", n)
	}
	big, ok, err := b.AcquireN(ctx, "pod", 8, 16)
	if !ok || err != nil {
		t.Fatalf("AcquireN(16) on an empty window of 8 = %v, %v, want it to run alone", ok, err)
	}
	if _, ok, _ := a.Acquire(ctx, "pod", 8); ok {
		t.Fatal("Acquire() beside 16 slots of 8 succeeded")
	}
	if n, _ := a.Count(ctx, "pod"); n != 8 || b.Snapshot().Held["pod"] != 8 {
		t.Fatalf("16 sequences on a window of 8: Count() = %d, held %v, want the whole window, 8", n, b.Snapshot().Held)
	}
	b.Release(ctx, big)
	if n, _ := a.Count(ctx, "pod"); n != 0 || len(b.Snapshot().Held) != 0 {
		t.Fatalf("Count() = %d, held %v after the release, want none", n, b.Snapshot().Held)
	}
}

// TestAcquireNLocal: without Redis a replica decides against its share of
// the window in slots, the same way.
func TestAcquireNLocal(t *testing.T) {
	t.Parallel()
	c, err := New(Settings{URL: "redis://127.0.0.1:1/0", Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	l, ok, err := c.AcquireN(ctx, "p", 16, 5) // share 8
	if !ok || err != nil {
		t.Fatalf("AcquireN(5 of a share of 8) = %v, %v", ok, err)
	}
	if _, ok, _ := c.AcquireN(ctx, "p", 16, 4); ok {
		t.Fatal("AcquireN(4) beside 5 of a share of 8 succeeded")
	}
	l3, ok, _ := c.AcquireN(ctx, "p", 16, 3)
	if !ok || c.Snapshot().Held["p"] != 8 {
		t.Fatalf("AcquireN(3) = %v, held %v, want 8 slots held", ok, c.Snapshot().Held)
	}
	c.Release(ctx, l)
	c.Release(ctx, l3)
	if s := c.Snapshot(); len(s.Held) != 0 || s.PendingReleases != 0 {
		t.Fatalf("Snapshot() = %+v, want nothing held or pending", s)
	}
	big, ok, _ := c.AcquireN(ctx, "p", 16, 1<<30) // a client's huge n
	if !ok || c.Snapshot().Held["p"] != 16 {
		t.Fatalf("AcquireN(2^30) with nothing held = %v, held %v, want it to run alone on the whole window (16)", ok, c.Snapshot().Held)
	}
	c.Release(ctx, big)
}
