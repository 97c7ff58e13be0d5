package cluster

import (
	"context"
	"errors"
	"time"
)

// maxFlush bounds the pending releases one heartbeat sends, so the call
// fits its timeout; the rest wait for the next heartbeat.
const maxFlush = 1000

// Run beats at once and then every Settings.HeartbeatInterval until ctx
// ends: it announces the replica, learns the replica count, renews this
// replica's leases and, in local mode, probes Redis (see Beat). When ctx
// ends it withdraws the announcement, best effort, so the other replicas
// count one fewer at once, and returns nil. It starts no goroutine. Call it
// once; a second call returns an error.
func (c *Cluster) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("cluster: Run called twice")
	}
	t := time.NewTicker(c.s.HeartbeatInterval)
	defer t.Stop()
	for {
		_ = c.Beat(ctx) // a failure shows in Up and OnChange
		select {
		case <-ctx.Done():
			c.leave(ctx)
			return nil
		case <-t.C:
		}
	}
}

// Beat is one heartbeat, in one atomic call: it announces the replica for 3
// heartbeat intervals, stores the number of live replicas for Share, and
// writes every lease this replica holds with a fresh expiry (renewing shared
// leases, making local ones shared, restoring any that expired). Then it
// removes from Redis the leases released while they could not be. On
// success the Cluster is in shared mode. Run calls it; call it directly to
// start in shared mode before serving, or to drive the Cluster by hand in
// tests. The error matches ErrUnavailable, or is ctx's.
func (c *Cluster) Beat(ctx context.Context) error {
	// One at a time: a release queued behind one heartbeat's write must not
	// be flushed before another heartbeat writes the lease back.
	c.beatMu.Lock()
	defer c.beatMu.Unlock()
	keys, args := c.beatArgs()
	var n int64
	err := c.call(ctx, func(ctx context.Context) error {
		var err error
		n, err = c.scripts.beat.Run(ctx, c.rdb, keys, args...).Int64()
		return err
	})
	c.mu.Lock()
	c.beating--
	c.mu.Unlock()
	if err != nil {
		return err
	}
	c.replicas.Store(max(1, n))
	c.flush(ctx)
	if c.up.CompareAndSwap(false, true) {
		c.notify()
	}
	return nil
}

// beatArgs builds the heartbeat's keys and arguments from the held leases,
// marks them written and counts the heartbeat as in flight.
func (c *Cluster) beatArgs() ([]string, []any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.beating++
	keys := make([]string, 1, 1+len(c.held))
	keys[0] = c.replicasKey()
	args := []any{c.nowArg(), c.s.ReplicaID,
		(replicaBeats * c.s.HeartbeatInterval).Milliseconds(), c.s.LeaseTTL.Milliseconds()}
	for pod, m := range c.held {
		keys = append(keys, c.leaseKey(pod))
		args = append(args, len(m))
		for id := range m {
			args = append(args, id)
			m[id] = true
		}
	}
	return keys, args
}

// flush removes up to maxFlush pending releases from Redis; those it could
// not remove stay pending.
func (c *Cluster) flush(ctx context.Context) {
	c.mu.Lock()
	n := min(len(c.pending), maxFlush)
	batch := c.pending[:n:n]
	c.pending = c.pending[n:]
	c.mu.Unlock()
	if n == 0 {
		return
	}
	byPod := make(map[string][]any)
	for _, l := range batch {
		byPod[l.pod] = append(byPod[l.pod], l.memberArgs()...)
	}
	err := c.call(ctx, func(ctx context.Context) error {
		pipe := c.rdb.Pipeline()
		for pod, ids := range byPod {
			pipe.ZRem(ctx, c.leaseKey(pod), ids...)
		}
		_, err := pipe.Exec(ctx)
		return err
	})
	if err != nil {
		c.mu.Lock()
		c.pending = append(batch, c.pending...)
		c.mu.Unlock()
	}
}

// leave withdraws this replica's announcement, best effort, bounded by
// Settings.Timeout even though ctx has ended.
func (c *Cluster) leave(ctx context.Context) {
	if !c.up.Load() {
		return
	}
	_ = c.call(context.WithoutCancel(ctx), func(ctx context.Context) error {
		return c.rdb.ZRem(ctx, c.replicasKey(), c.s.ReplicaID).Err()
	})
}

// Replicas asks Redis how many replicas are alive now (announced within the
// last 3 heartbeat intervals) and keeps the count for Share. The error
// matches ErrUnavailable when Redis cannot answer; then Share keeps the last
// known count.
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
