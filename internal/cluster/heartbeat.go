package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Run beats at once and then every Settings.HeartbeatInterval until ctx
// ends (see Beat). Between beats it looks at the demand every quarter
// interval and beats early, at most once a quarter interval, when a pod's
// demand is above this replica's share and the last answer said more may
// come. Once no beat has answered for LeaseTTL/2 it puts every share at its
// floor. When ctx ends it withdraws the replica, best effort, so the others
// may take its slots at once, and returns nil. It starts no goroutine. Call
// it once; a second call returns an error.
func (c *Cluster) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("cluster: Run called twice")
	}
	every := c.s.HeartbeatInterval
	t := time.NewTicker(max(every/4, time.Millisecond))
	defer t.Stop()
	last := time.Time{}
	for {
		now := c.now()
		if now.Sub(last) >= every || c.hungry() {
			last = now
			_ = c.Beat(ctx) // a failure shows in Up and OnChange
		}
		if c.lapse(c.now()) {
			c.sharesChanged()
		}
		select {
		case <-ctx.Done():
			c.leave(ctx)
			return nil
		case <-t.C:
		}
	}
}

// hungry reports whether a beat before the heartbeat is due is worth it:
// some pod's demand is above this replica's share while the last answer
// said more may come, or a share shrank and Redis should learn that the
// slots are free.
func (c *Cluster) hungry() bool {
	if !c.up.Load() {
		return false
	}
	d := c.readDemand()
	c.sh.mu.Lock()
	defer c.sh.mu.Unlock()
	if c.sh.confirm {
		return true
	}
	for pod, s := range c.sh.pods {
		if s.owed && c.wantsLocked(s, d[pod]) > s.cap {
			return true
		}
	}
	return false
}

// readDemand asks Settings.Demand, outside every lock.
func (c *Cluster) readDemand() map[string]Demand {
	if c.s.Demand == nil {
		return nil
	}
	return c.s.Demand()
}

// wantsLocked converts a pod's demand to slots of its base: what it runs
// and holds waiting. c.sh.mu is held.
func (c *Cluster) wantsLocked(s *share, d Demand) int {
	return toBase(s.base, d.window, d.inFlight+d.waiting)
}

// toBase converts slots of a window of w into slots of base (w ≤ 0 or
// above base counts as base), rounded up and at most base.
func toBase(base, w, slots int) int {
	if slots <= 0 {
		return 0
	}
	if w <= 0 || w >= base {
		return min(slots, base)
	}
	return min(base, int(math.Ceil(float64(slots)*float64(base)/float64(w))))
}

// Beat is one heartbeat, in one atomic call: it announces the replica,
// learns how many are alive (Share, the floor), and renews this replica's
// lease on every pod's window with its demand (Settings.Demand), taking
// the grant Redis answers as the pod's share (see the package comment). On
// success the Cluster is in shared mode. Run calls it; call it directly to
// start in shared mode before serving, or to drive the Cluster by hand in
// tests. The error matches ErrUnavailable, or is ctx's.
func (c *Cluster) Beat(ctx context.Context) error {
	c.beatMu.Lock()
	defer c.beatMu.Unlock()
	demand := c.readDemand()
	sent := c.now()
	pods, keys, args := c.beatArgs(sent, demand)
	var res []int64
	err := c.call(ctx, func(ctx context.Context) error {
		var err error
		res, err = c.scripts.beat.Run(ctx, c.rdb, keys, args...).Int64Slice()
		return err
	})
	if err == nil && len(res) != 2+3*len(pods) {
		err = &unavailableError{cause: fmt.Errorf("beat script returned %d values, want %d", len(res), 2+3*len(pods))}
	}
	if err != nil {
		return err
	}
	c.replicas.Store(max(1, res[0]))
	if c.applyGrants(sent, int(res[0]), res[1], pods, res[2:]) {
		c.sharesChanged()
	}
	if c.up.CompareAndSwap(false, true) {
		c.notify()
	}
	return nil
}

// beatArgs builds the heartbeat's keys and arguments at now: the
// write-back time and the replicas seen before the epoch (while it is
// young), then per pod its base, the cap admission uses now, what runs (in
// slots of base), what it wants, its floor and whether it is fresh (never
// granted a slot of the pod).
func (c *Cluster) beatArgs(now time.Time, demand map[string]Demand) (pods []*share, keys []string, args []any) {
	c.sh.mu.Lock()
	defer c.sh.mu.Unlock()
	// The beat's number rises across restarts of a process that keeps its
	// ReplicaID: it is at least the time in µs.
	c.beatSeq = max(c.beatSeq+1, time.Now().UnixMicro())
	keys = append(make([]string, 0, 2+len(c.sh.pods)), c.replicasKey(), c.s.KeyPrefix+"epoch")
	prior := 0
	if now.Before(c.sh.priorUntil) {
		prior = c.sh.prior
	}
	args = append(make([]any, 0, 7+6*len(c.sh.pods)), c.nowArg(), c.s.ReplicaID,
		c.s.LeaseTTL.Milliseconds(), c.s.ForgetAfter.Milliseconds(), c.beatSeq, c.writeBack().Milliseconds(), prior)
	for pod, s := range c.sh.pods {
		d := demand[pod]
		s.wants = c.wantsLocked(s, d)
		s.sentFloor = c.floorLocked(s.base)
		// Redis may keep this beat's floor even if its answer is lost:
		// the lapse never goes above the least floor it may hold.
		if s.floorKnown {
			s.lapseFloor = min(s.lapseFloor, s.sentFloor)
		} else {
			s.lapseFloor, s.floorKnown = s.sentFloor, true
		}
		pods = append(pods, s)
		keys = append(keys, c.leaseKey(pod))
		fresh := 0
		if !s.holder {
			fresh = 1
		}
		args = append(args, s.base, s.cap, toBase(s.base, d.window, d.inFlight), s.wants, s.sentFloor, fresh)
	}
	return pods, keys, args
}

// writeBack is how long after a new epoch's first heartbeat every replica
// still running has renewed at least once, so that Redis holds what each
// runs: Run looks every quarter heartbeat interval and beats once an
// interval has passed, so beats are at most 1¼ intervals apart, and a
// beat reaches Redis within Timeout. Two intervals plus Timeout leave
// three quarters of an interval for scheduling delays. Every replica of a
// deployment has the same interval and Timeout (one policy).
func (c *Cluster) writeBack() time.Duration {
	return 2*c.s.HeartbeatInterval + c.s.Timeout
}

// applyGrants takes a heartbeat's answer (the epoch; grant, target, free
// per pod, in beatArgs' order) as the new shares and reports whether a cap
// changed. A pod removed meanwhile is skipped: its entry expires in Redis.
func (c *Cluster) applyGrants(sent time.Time, replicas int, epoch int64, pods []*share, res []int64) bool {
	c.sh.mu.Lock()
	defer c.sh.mu.Unlock()
	if c.sh.epochKnown && epoch != c.sh.epoch {
		// Redis lost its data: the replicas seen so far may run their
		// floors without it until they reach it again (beatScript).
		c.sh.prior = c.seenLocked()
		c.sh.priorUntil = sent.Add(c.s.LeaseTTL + c.s.ForgetAfter)
	}
	c.sh.epoch, c.sh.epochKnown = epoch, true
	c.sawLocked(sent, replicas)
	c.sh.renewed, c.sh.lapsed, c.sh.confirm = sent, false, false
	changed := false
	for i, s := range pods {
		grant, target, free := int(res[3*i]), int(res[3*i+1]), int(res[3*i+2])
		if c.sh.pods[s.pod] != s {
			continue
		}
		s.grant, s.granted = min(grant, s.base), true
		s.holder = s.holder || s.grant > 0
		// Redis holds this beat's floor now: an older beat arriving late is
		// refused by its number.
		s.lapseFloor = s.sentFloor
		s.owed = target > grant || free > 0
		if s.cap != s.grant {
			c.sh.confirm = c.sh.confirm || s.grant < s.cap
			s.cap, changed = s.grant, true
		}
	}
	return changed
}

// leave withdraws this replica's announcement and leases, best effort,
// bounded by Settings.Timeout even though ctx has ended.
func (c *Cluster) leave(ctx context.Context) {
	if !c.up.Load() {
		return
	}
	c.sh.mu.Lock()
	keys := []string{c.replicasKey()}
	for pod := range c.sh.pods {
		keys = append(keys, c.leaseKey(pod))
	}
	c.sh.mu.Unlock()
	_ = c.call(context.WithoutCancel(ctx), func(ctx context.Context) error {
		return c.scripts.leave.Run(ctx, c.rdb, keys, c.s.ReplicaID).Err()
	})
}

// Replicas asks Redis how many replicas are alive now (announced within the
// last LeaseTTL) and keeps the count for Share. The error matches
// ErrUnavailable when Redis cannot answer; then Share keeps the last known
// count.
func (c *Cluster) Replicas(ctx context.Context) (int, error) {
	var n int64
	err := c.call(ctx, func(ctx context.Context) error {
		var err error
		n, err = c.scripts.count.Run(ctx, c.rdb, []string{c.replicasKey()}, c.nowArg()).Int64()
		return err
	})
	if err != nil {
		return 0, err
	}
	c.replicas.Store(max(1, n))
	return int(n), nil
}

// LastReplicas returns the last known replica count, the one Share divides
// by. It does no I/O.
func (c *Cluster) LastReplicas() int { return int(c.replicas.Load()) }

func (c *Cluster) replicasKey() string { return c.s.KeyPrefix + "replicas" }

func (c *Cluster) leaseKey(pod string) string { return c.s.KeyPrefix + "lease:" + pod }
