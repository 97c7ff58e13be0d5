package cluster

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// demandOf is a test's Settings.Demand: set by hand, read by beats.
type demandOf struct {
	mu sync.Mutex
	d  map[string]Demand
}

func (d *demandOf) set(pod string, v Demand) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.d == nil {
		d.d = map[string]Demand{}
	}
	d.d[pod] = v
}

func (d *demandOf) get() map[string]Demand {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := make(map[string]Demand, len(d.d))
	for k, v := range d.d {
		m[k] = v
	}
	return m
}

// leaseReplicas returns n Clusters r0… on r with a lease time of 1 s, a
// heartbeat of 300 ms, a floor kept 6 s, the clock and a demand each, every
// one leasing pod "p" of base; none has beaten yet.
func leaseReplicas(t *testing.T, r *redisServer, n, base int, clock *fakeClock) ([]*Cluster, []*demandOf) {
	t.Helper()
	cs := make([]*Cluster, n)
	ds := make([]*demandOf, n)
	for i := range cs {
		ds[i] = &demandOf{}
		cs[i] = newCluster(t, r, Settings{ReplicaID: "r" + strconv.Itoa(i), Now: clock.Now, DownAfter: 1,
			LeaseTTL: time.Second, HeartbeatInterval: 300 * time.Millisecond, ForgetAfter: 6 * time.Second,
			Demand: ds[i].get})
		cs[i].SetPods(map[string]int{"p": base})
	}
	return cs, ds
}

// reserved sums what pod's lease hash reserves at now (ms): live entries
// their held slots, expired ones min(held, floor).
func reserved(t *testing.T, r *redisServer, c *Cluster, pod string, now time.Time) int {
	t.Helper()
	h, err := r.client().HGetAll(t.Context(), c.leaseKey(pod)).Result()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, v := range h {
		f := strings.Fields(v)
		held, _ := strconv.Atoi(f[0])
		exp, _ := strconv.ParseInt(f[1], 10, 64)
		fl, _ := strconv.Atoi(f[2])
		if now.UnixMilli() > exp {
			held = min(held, fl)
		}
		sum += held
	}
	return sum
}

// TestLeaseSteps drives two replicas' leases on one pod (base 10) through a
// step table on a fake clock against a real Redis: the warm-up of a new
// epoch, the even split, demand moving slots (given back over two beats),
// the lapse to the floor without Redis, a restart empty, an expired
// lease's floor kept and then forgotten, and a replica that leaves. After
// every step the pod's entries reserve at most the base and every cap is
// at most what its entry reserves.
func TestLeaseSteps(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	clock := newFakeClock()
	cs, ds := leaseReplicas(t, r, 2, 10, clock)
	ctx := t.Context()
	type step struct {
		name    string
		advance time.Duration
		do      func() // beyond the beat: a restart, a lapse
		beat    int    // the replica that beats, -1 none
		demand  Demand // its demand before it beats
		caps    [2]int
	}
	restart := func() { r.stop(); r.start() }
	lapse := func() {
		for _, c := range cs {
			c.lapse(clock.Now())
		}
	}
	tests := []step{
		{"r0 first: a new epoch grows nobody", 0, nil, 0, Demand{Waiting: 5}, [2]int{0, 0}},
		{"r1 first", 0, nil, 1, Demand{}, [2]int{0, 0}},
		{"after a lease time: r0 takes its wants and the slack's larger half", time.Second, nil, 0, Demand{Waiting: 3}, [2]int{7, 0}},
		{"r1 the rest", 0, nil, 1, Demand{}, [2]int{7, 3}},
		{"r1 wants 10: owed 7, r0 still holds 7", 0, nil, 1, Demand{Waiting: 10}, [2]int{7, 3}},
		{"r0 gives back to its wants", 0, nil, 0, Demand{InFlight: 3}, [2]int{3, 3}},
		{"r1: r0's old cap is still counted", 0, nil, 1, Demand{Waiting: 10}, [2]int{3, 3}},
		{"r0 confirms", 0, nil, 0, Demand{InFlight: 3}, [2]int{3, 3}},
		{"r1 takes the 7", 0, nil, 1, Demand{InFlight: 3, Waiting: 7}, [2]int{3, 7}},
		{"no answer for half a lease: each keeps min(cap, 10/2)", 600 * time.Millisecond, lapse, -1, Demand{}, [2]int{3, 5}},
		{"Redis back empty: r1 writes back its 5, grows not", 0, restart, 1, Demand{InFlight: 5, Waiting: 5}, [2]int{3, 5}},
		{"r0 writes back its 3", 0, nil, 0, Demand{InFlight: 3}, [2]int{3, 5}},
		{"a lease time later r1 grows", time.Second, nil, 1, Demand{InFlight: 5, Waiting: 5}, [2]int{3, 7}},
		{"r0 falls silent: its lease expires, its floor stays reserved", 1100 * time.Millisecond, nil, 1, Demand{InFlight: 7, Waiting: 3}, [2]int{3, 7}},
		{"forgotten after ForgetAfter", 6 * time.Second, nil, 1, Demand{InFlight: 7, Waiting: 3}, [2]int{3, 10}},
	}
	for i, tt := range tests {
		clock.Advance(tt.advance)
		if tt.do != nil {
			tt.do()
		}
		if tt.beat >= 0 {
			ds[tt.beat].set("p", tt.demand)
			if err := cs[tt.beat].Beat(ctx); err != nil {
				t.Fatalf("step %d (%s): Beat: %v", i, tt.name, err)
			}
		}
		for j, c := range cs {
			if got := c.Snapshot().Shares["p"].Cap; got != tt.caps[j] {
				t.Errorf("step %d (%s): r%d cap %d, want %d", i, tt.name, j, got, tt.caps[j])
			}
		}
		if sum := reserved(t, r, cs[0], "p", clock.Now()); sum > 10 {
			t.Errorf("step %d (%s): the entries reserve %d of 10", i, tt.name, sum)
		}
	}
}

// TestLeaseRestartEmptySilentReplica: Redis restarts empty while r0 cannot
// reach it (calls timing out on a busy machine, a partition) and runs its
// floor alone. The new epoch does not know r0, so for LeaseTTL +
// ForgetAfter, as long as Redis would have kept r0's floor, r1 grows only
// into what r0's floor leaves; then r0 counts as gone, as a replica cut off
// that long does. Issue 35: without it r1 took the whole base after the
// warm-up while r0 still ran its floor, and the pod ran 13 of 10.
func TestLeaseRestartEmptySilentReplica(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	clock := newFakeClock()
	cs, ds := leaseReplicas(t, r, 2, 10, clock)
	ctx := t.Context()
	type step struct {
		name    string
		advance time.Duration
		do      func()
		beat    int // the replica that beats, -1 none
		demand  Demand
		caps    [2]int
	}
	restart := func() { r.stop(); r.start() }
	lapse := func() {
		for _, c := range cs {
			c.lapse(clock.Now())
		}
	}
	tests := []step{
		{"r0 first: a new epoch", 0, nil, 0, Demand{Waiting: 10}, [2]int{0, 0}},
		{"r1", 0, nil, 1, Demand{Waiting: 10}, [2]int{0, 0}},
		{"after the warm-up r0 takes half", time.Second, nil, 0, Demand{Waiting: 10}, [2]int{5, 0}},
		{"r1 the other half", 0, nil, 1, Demand{Waiting: 10}, [2]int{5, 5}},
		{"no answer for half a lease: both at their floor", 600 * time.Millisecond, lapse, -1, Demand{}, [2]int{5, 5}},
		{"Redis back empty; only r1 reaches it", 0, restart, 1, Demand{InFlight: 5, Waiting: 10}, [2]int{5, 5}},
		{"after the warm-up r1 still leaves r0 its floor", 1100 * time.Millisecond, nil, 1, Demand{InFlight: 5, Waiting: 10}, [2]int{5, 5}},
		{"and until the epoch is ForgetAfter older", 5800 * time.Millisecond, nil, 1, Demand{InFlight: 5, Waiting: 10}, [2]int{5, 5}},
		{"then r0 counts as gone", 200 * time.Millisecond, nil, 1, Demand{InFlight: 5, Waiting: 10}, [2]int{5, 10}},
	}
	for i, tt := range tests {
		clock.Advance(tt.advance)
		if tt.do != nil {
			tt.do()
		}
		if tt.beat >= 0 {
			ds[tt.beat].set("p", tt.demand)
			if err := cs[tt.beat].Beat(ctx); err != nil {
				t.Fatalf("step %d (%s): Beat: %v", i, tt.name, err)
			}
		}
		sum := 0
		for j, c := range cs {
			got := c.Snapshot().Shares["p"].Cap
			sum += got
			if got != tt.caps[j] {
				t.Errorf("step %d (%s): r%d cap %d, want %d", i, tt.name, j, got, tt.caps[j])
			}
		}
		// The last step is the documented worst case of a replica cut off
		// longer than LeaseTTL + ForgetAfter (docs/cluster.md).
		if sum > 10 && i < len(tests)-1 {
			t.Errorf("step %d (%s): the caps sum to %d of 10", i, tt.name, sum)
		}
	}
}

// TestLeaseFairAndLeave: three hungry replicas split a base of 10 as 3, 3
// and 4 (max-min fair, remainders by id) and never above it; one that
// leaves frees its slots for the others at their next beat.
func TestLeaseFairAndLeave(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	clock := newFakeClock()
	cs, ds := leaseReplicas(t, r, 3, 10, clock)
	ctx := t.Context()
	beatAll := func() {
		t.Helper()
		for _, c := range cs {
			if err := c.Beat(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	caps := func() [3]int {
		var got [3]int
		for i, c := range cs {
			got[i] = c.Snapshot().Shares["p"].Cap
		}
		return got
	}
	for _, d := range ds {
		d.set("p", Demand{Waiting: 10})
	}
	beatAll()
	clock.Advance(time.Second) // past the new epoch's warm-up
	for range 3 {
		beatAll()
	}
	if got := caps(); got != [3]int{3, 3, 4} {
		t.Fatalf("caps %v, want [3 3 4]", got)
	}
	ctx2, cancel := context.WithCancel(ctx)
	cancel()
	cs[2].leave(ctx2) // what Run does when its context ends
	beatAll()
	if got := caps(); got[0]+got[1] != 10 || got[0] != 5 {
		t.Fatalf("caps after r2 left %v, want 5 and 5 for r0 and r1", got)
	}
}

// TestLeaseUnreachableFromStart: a replica whose Redis never answers holds
// nothing of a pod until half a lease time passed, then its floor (the
// base over Settings.Replicas), says so in Snapshot, and never calls
// OnChange.
func TestLeaseUnreachableFromStart(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	called := false
	shares := 0
	c, err := New(Settings{URL: "redis://127.0.0.1:1/0", Replicas: 2, Now: clock.Now, LeaseTTL: time.Second,
		OnChange: func(bool) { called = true }, OnShares: func() { shares++ }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetPods(map[string]int{"p": 9})
	if err := c.Beat(t.Context()); !errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Beat() = %v, want ErrUnavailable only", err)
	}
	if sh, ok := c.Snapshot().Shares["p"]; sh.Cap != 0 || sh.Base != 9 || !ok {
		t.Fatalf("Shares[p] = %+v, %v before the lapse; want cap 0, base 9", sh, ok)
	}
	clock.Advance(500 * time.Millisecond)
	if !c.lapse(clock.Now()) {
		t.Fatal("lapse() = false after half a lease time")
	}
	if got := c.Snapshot().Shares["p"].Cap; got != 4 {
		t.Fatalf("Shares[p].Cap = %d after the lapse, want ⌊9/2⌋ = 4", got)
	}
	if w, b, tok := c.Scale("p", 9, 900, 90); w != 4 || b != 400 || tok != 40 {
		t.Fatalf("Scale(p, 9, 900, 90) = %d, %d, %d; want 4, 400, 40", w, b, tok)
	}
	if w, _, _ := c.Scale("p", 4, 0, 0); w != 1 { // a cut window: ⌊4 × 4/9⌋
		t.Fatalf("Scale(p, 4) = %d, want 1", w)
	}
	c.SetPods(map[string]int{"p": 9, "q": 3}) // a pod declared while lapsed: its floor at once
	if got := c.Snapshot().Shares["q"].Cap; got != 1 {
		t.Fatalf("Shares[q].Cap = %d, want ⌊3/2⌋ = 1", got)
	}
	if s := c.Snapshot(); !s.Lapsed || s.Up || s.Shares["p"].Cap != 4 {
		t.Fatalf("Snapshot() = %+v, want lapsed, local, p at 4", s)
	}
	if c.Up() || called || c.Share(10) != 5 || shares != 2 {
		t.Fatalf("Up() = %v, OnChange called %v, Share(10) = %v, OnShares %d times; want false, false, 5, 2",
			c.Up(), called, c.Share(10), shares)
	}
}

// TestLateBeatChangesNothing: a heartbeat delivered after a newer one (a
// stalled link that lets its bytes through late) writes nothing, so the
// entry keeps the newer beat's cap and floor; and a lapse never goes above
// the floor the last answered beat left in Redis.
func TestLateBeatChangesNothing(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	clock := newFakeClock()
	cs, ds := leaseReplicas(t, r, 1, 10, clock)
	c := cs[0]
	ctx := t.Context()
	ds[0].set("p", Demand{Waiting: 4})
	clock.Advance(0)
	if err := c.Beat(ctx); err != nil { // the epoch's warm-up: nothing yet
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	c.beatMu.Lock()
	_, keys, late := c.beatArgs(clock.Now(), c.readDemand()) // sent now, delivered after the next
	c.beatMu.Unlock()
	if err := c.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := r.client().HGet(ctx, c.leaseKey("p"), "r0").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.scripts.beat.Run(ctx, c.rdb, keys, late...).Err(); err != nil {
		t.Fatal(err)
	}
	after, err := r.client().HGet(ctx, c.leaseKey("p"), "r0").Result()
	if err != nil || after != before {
		t.Fatalf("entry after a late beat = %q (%v), want it unchanged: %q", after, err, before)
	}
	sh := c.Snapshot().Shares["p"]
	clock.Advance(600 * time.Millisecond)
	c.lapse(clock.Now())
	if got := c.Snapshot().Shares["p"].Cap; got > sh.Cap || got > 10 {
		t.Fatalf("cap after the lapse = %d, want at most %d (the floor Redis holds)", got, sh.Cap)
	}
}
