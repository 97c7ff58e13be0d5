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
		{"r0 first: a new epoch grows nobody", 0, nil, 0, Demand{waiting: 5}, [2]int{0, 0}},
		{"r1 first", 0, nil, 1, Demand{}, [2]int{0, 0}},
		{"after a lease time: r0 takes its wants and the slack's larger half", time.Second, nil, 0, Demand{waiting: 3}, [2]int{7, 0}},
		{"r1 the rest", 0, nil, 1, Demand{}, [2]int{7, 3}},
		{"r1 wants 10: owed 7, r0 still holds 7", 0, nil, 1, Demand{waiting: 10}, [2]int{7, 3}},
		{"r0 gives back to its wants", 0, nil, 0, Demand{inFlight: 3}, [2]int{3, 3}},
		{"r1: r0's old cap is still counted", 0, nil, 1, Demand{waiting: 10}, [2]int{3, 3}},
		{"r0 confirms", 0, nil, 0, Demand{inFlight: 3}, [2]int{3, 3}},
		{"r1 takes the 7", 0, nil, 1, Demand{inFlight: 3, waiting: 7}, [2]int{3, 7}},
		{"no answer for half a lease: each keeps min(cap, 10/2)", 600 * time.Millisecond, lapse, -1, Demand{}, [2]int{3, 5}},
		{"Redis back empty: r1 writes back its 5, grows not", 0, restart, 1, Demand{inFlight: 5, waiting: 5}, [2]int{3, 5}},
		{"r0 writes back its 3", 0, nil, 0, Demand{inFlight: 3}, [2]int{3, 5}},
		{"a lease time later r1 grows", time.Second, nil, 1, Demand{inFlight: 5, waiting: 5}, [2]int{3, 7}},
		{"r0 falls silent: its lease expires, its floor stays reserved", 1100 * time.Millisecond, nil, 1, Demand{inFlight: 7, waiting: 3}, [2]int{3, 7}},
		{"forgotten after ForgetAfter", 6 * time.Second, nil, 1, Demand{inFlight: 7, waiting: 3}, [2]int{3, 10}},
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
		{"r0 first: a new epoch", 0, nil, 0, Demand{waiting: 10}, [2]int{0, 0}},
		{"r1", 0, nil, 1, Demand{waiting: 10}, [2]int{0, 0}},
		{"after the warm-up r0 takes half", time.Second, nil, 0, Demand{waiting: 10}, [2]int{5, 0}},
		{"r1 the other half", 0, nil, 1, Demand{waiting: 10}, [2]int{5, 5}},
		{"no answer for half a lease: both at their floor", 600 * time.Millisecond, lapse, -1, Demand{}, [2]int{5, 5}},
		{"Redis back empty; only r1 reaches it", 0, restart, 1, Demand{inFlight: 5, waiting: 10}, [2]int{5, 5}},
		{"after the warm-up r1 still leaves r0 its floor", 1100 * time.Millisecond, nil, 1, Demand{inFlight: 5, waiting: 10}, [2]int{5, 5}},
		{"and until the epoch is ForgetAfter older", 5800 * time.Millisecond, nil, 1, Demand{inFlight: 5, waiting: 10}, [2]int{5, 5}},
		{"then r0 counts as gone", 200 * time.Millisecond, nil, 1, Demand{inFlight: 5, waiting: 10}, [2]int{5, 10}},
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
		d.set("p", Demand{waiting: 10})
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
	if err := c.Beat(t.Context()); !errors.Is(err, errUnavailable) || errors.Is(err, context.DeadlineExceeded) {
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
	ds[0].set("p", Demand{waiting: 4})
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

// freshReplicas returns n Clusters r0… on r leasing pod "p" of base, with
// a lease time of 10 s, a heartbeat of 500 ms and a call timeout of 500 ms
// (a write-back time of 1.5 s), the clock and a demand each; none has
// beaten yet.
func freshReplicas(t *testing.T, r *redisServer, n, base int, clock *fakeClock) ([]*Cluster, []*demandOf) {
	t.Helper()
	cs := make([]*Cluster, n)
	ds := make([]*demandOf, n)
	for i := range cs {
		ds[i] = &demandOf{}
		cs[i] = newCluster(t, r, Settings{ReplicaID: "r" + strconv.Itoa(i), Now: clock.Now, DownAfter: 1,
			LeaseTTL: 10 * time.Second, HeartbeatInterval: 500 * time.Millisecond, Timeout: 500 * time.Millisecond,
			ForgetAfter: time.Minute, Demand: ds[i].get})
		cs[i].SetPods(map[string]int{"p": base})
	}
	return cs, ds
}

// entryReserve is what r's entry of c reserves for pod at now, and whether
// there is one.
func entryReserve(t *testing.T, r *redisServer, c *Cluster, pod string, now time.Time) (int, bool) {
	t.Helper()
	v, err := r.client().HGet(t.Context(), c.leaseKey(pod), c.ReplicaID()).Result()
	if err != nil {
		return 0, false
	}
	f := strings.Fields(v)
	held, _ := strconv.Atoi(f[0])
	exp, _ := strconv.ParseInt(f[1], 10, 64)
	fl, _ := strconv.Atoi(f[2])
	if now.UnixMilli() > exp {
		held = min(held, fl)
	}
	return held, true
}

// TestLeaseNewEpochFreshReplicas walks fresh replicas (never granted a
// slot) through a new epoch on a fake clock against a real Redis: two and
// three starting together on a new Redis, one starting while another
// holds shares, and one starting while Redis restarted empty under a
// holder, which reaches the new Redis in time or not (then the holder is
// missing: the fresh replica waits, as a holder does, while the missing
// one may still run its share). A fresh replica serves within the
// write-back time (1.5 s here, 1 s with the defaults), not a lease time
// (10 s), unless a replica is missing; and after every step
// the pod never runs more than its window: what the replicas may run
// (those not yet written back to a restarted Redis included) sums to at
// most the base, the entries reserve at most the base, and a replica that
// has beaten since the last restart runs no more than its entry reserves
// (a replica runs its cap, or more while requests admitted under a larger
// cap still run).
func TestLeaseNewEpochFreshReplicas(t *testing.T) {
	t.Parallel()
	type step struct {
		name    string
		advance time.Duration
		restart bool // Redis restarts empty before the beat
		beat    int  // the replica that beats, -1 none
		demand  Demand
		caps    []int
	}
	tests := []struct {
		name  string
		n     int
		steps []step
	}{
		{"two fresh replicas on a new Redis", 2, []step{
			{"r0 starts the epoch: nothing before the write-back time", 0, false, 0, Demand{waiting: 5}, []int{0, 0}},
			{"r1 starts", 0, false, 1, Demand{waiting: 3}, []int{0, 0}},
			{"a second later: still nothing", time.Second, false, 0, Demand{waiting: 5}, []int{0, 0}},
			{"at the write-back time r0 takes its floor, 10/2", 500 * time.Millisecond, false, 0, Demand{waiting: 5}, []int{5, 0}},
			{"r1 its wants and half the slack, within its floor", 0, false, 1, Demand{waiting: 3}, []int{5, 4}},
			{"r0 is now a holder: no growth in the lease time", 0, false, 0, Demand{waiting: 7}, []int{5, 4}},
			{"after the lease time r0 grows into what r1 leaves", 8500 * time.Millisecond, false, 0, Demand{waiting: 7}, []int{6, 4}},
			{"r1 gives back to its wants", 0, false, 1, Demand{waiting: 3}, []int{6, 3}},
			{"r1 confirms", 0, false, 1, Demand{waiting: 3}, []int{6, 3}},
			{"r0 takes the rest", 0, false, 0, Demand{waiting: 7}, []int{7, 3}},
		}},
		{"three fresh replicas on a new Redis", 3, []step{
			{"r0", 0, false, 0, Demand{waiting: 10}, []int{0, 0, 0}},
			{"r1", 0, false, 1, Demand{waiting: 10}, []int{0, 0, 0}},
			{"r2", 0, false, 2, Demand{waiting: 10}, []int{0, 0, 0}},
			{"r0 its floor, 10/3", 1500 * time.Millisecond, false, 0, Demand{waiting: 10}, []int{3, 0, 0}},
			{"r1 its floor", 0, false, 1, Demand{waiting: 10}, []int{3, 3, 0}},
			{"r2 its floor: 9 of 10", 0, false, 2, Demand{waiting: 10}, []int{3, 3, 3}},
			{"after the lease time the last slot goes by id", 8500 * time.Millisecond, false, 2, Demand{waiting: 10}, []int{3, 3, 4}},
		}},
		{"one replica holds shares when another starts", 2, []step{
			{"r0 alone starts the epoch", 0, false, 0, Demand{waiting: 10}, []int{0, 0}},
			{"r0 takes its floor: alone, the whole base", 1500 * time.Millisecond, false, 0, Demand{inFlight: 10}, []int{10, 0}},
			{"r1 starts: nothing is left", 1500 * time.Millisecond, false, 1, Demand{waiting: 4}, []int{10, 0}},
			{"r1 after the write-back time: still nothing left", 1500 * time.Millisecond, false, 1, Demand{waiting: 4}, []int{10, 0}},
			{"r0 gives back to its fair part (a holder may shrink)", 0, false, 0, Demand{inFlight: 6, waiting: 4}, []int{6, 0}},
			{"r1: r0's old cap is still reserved", 0, false, 1, Demand{waiting: 4}, []int{6, 0}},
			{"r0 confirms", 0, false, 0, Demand{inFlight: 6, waiting: 4}, []int{6, 0}},
			{"r1 takes its wants", 0, false, 1, Demand{waiting: 4}, []int{6, 4}},
		}},
		{"Redis restarts empty under a holder that cannot reach it; a replica fresh on the pod waits", 2, []step{
			{"r0 starts an epoch", 0, false, 0, Demand{waiting: 10}, []int{0, 0}},
			{"r1 runs nothing of the pod", 5 * time.Second, false, 1, Demand{}, []int{0, 0}},
			{"after the lease time r0 takes the whole base", 5 * time.Second, false, 0, Demand{waiting: 10}, []int{10, 0}},
			{"Redis restarts empty; r1 starts a new epoch, r0 cannot reach it", 100 * time.Millisecond, true, 1, Demand{waiting: 4}, []int{10, 0}},
			{"r1 at the write-back time: r0 is missing and may run its 10, so nothing", 1500 * time.Millisecond, false, 1, Demand{waiting: 4}, []int{10, 0}},
			{"r0 lapses to its floor; r1 still waits out the lease time", 3400 * time.Millisecond, false, 1, Demand{waiting: 4}, []int{5, 0}},
			{"after the lease time r1 grows beside r0's floor, kept for it", 5100 * time.Millisecond, false, 1, Demand{waiting: 4}, []int{5, 5}},
		}},
		{"Redis restarts empty under a holder as a fresh replica starts", 2, []step{
			{"r0 starts an epoch", 0, false, 0, Demand{waiting: 10}, []int{0, 0}},
			{"r0 holds the whole base", 10 * time.Second, false, 0, Demand{inFlight: 10}, []int{10, 0}},
			{"Redis restarts empty; fresh r1 beats first: a new epoch", 100 * time.Millisecond, true, 1, Demand{waiting: 4}, []int{10, 0}},
			{"r0 writes back its 10 running within a beat; its cap shrinks to its fair part", 500 * time.Millisecond, false, 0, Demand{inFlight: 10}, []int{6, 0}},
			{"r1 before the write-back time: nothing", 400 * time.Millisecond, false, 1, Demand{waiting: 4}, []int{6, 0}},
			{"r1 at the write-back time: r0's 10 are reserved", 600 * time.Millisecond, false, 1, Demand{waiting: 4}, []int{6, 0}},
			{"r0's requests above its cap end", 0, false, 0, Demand{inFlight: 6}, []int{6, 0}},
			{"r1 takes its wants", 0, false, 1, Demand{waiting: 4}, []int{6, 4}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := startRedis(t)
			clock := newFakeClock()
			cs, ds := freshReplicas(t, r, tt.n, 10, clock)
			beaten := make([]bool, tt.n)  // since the last restart
			started := make([]bool, tt.n) // beaten once: its Run is running
			for i, st := range tt.steps {
				clock.Advance(st.advance)
				if st.restart {
					r.stop()
					r.start()
					clear(beaten)
				}
				for j, c := range cs {
					if started[j] {
						c.lapse(clock.Now()) // as Run does: LeaseTTL/2 unrenewed, the floor
					}
				}
				if st.beat >= 0 {
					ds[st.beat].set("p", st.demand)
					if err := cs[st.beat].Beat(t.Context()); err != nil {
						t.Fatalf("step %d (%s): Beat: %v", i, st.name, err)
					}
					beaten[st.beat], started[st.beat] = true, true
				}
				sum := 0
				for j, c := range cs {
					got := c.Snapshot().Shares["p"].Cap
					if got != st.caps[j] {
						t.Errorf("step %d (%s): r%d cap %d, want %d", i, st.name, j, got, st.caps[j])
					}
					// What it may run: its cap, or more while requests
					// admitted under a larger cap still run.
					runs := max(got, ds[j].get()["p"].inFlight)
					sum += runs
					if res, ok := entryReserve(t, r, c, "p", clock.Now()); beaten[j] && (!ok || runs > res) {
						t.Errorf("step %d (%s): r%d runs up to %d, its entry reserves %d (present %v)", i, st.name, j, runs, res, ok)
					}
				}
				if sum > 10 {
					t.Errorf("step %d (%s): the replicas run up to %d of a window of 10", i, st.name, sum)
				}
				if res := reserved(t, r, cs[0], "p", clock.Now()); res > 10 {
					t.Errorf("step %d (%s): the entries reserve %d of 10", i, st.name, res)
				}
			}
		})
	}
}
