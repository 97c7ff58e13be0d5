package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Lease is what one request holds of a pod's window on this replica: one
// slot, or n from AcquireN. The zero Lease is no lease. A Lease is a small
// value; copies name the same slots.
type Lease struct {
	pod, id string
	n       int // slots, ≥ 1 for a live lease
}

// members are the lease set's members for l, one per slot: its id alone for
// one slot, else id.1 … id.n.
func (l Lease) members() []string {
	if l.n <= 1 {
		return []string{l.id}
	}
	m := make([]string, l.n)
	for i := range m {
		m[i] = l.id + "." + strconv.Itoa(i+1)
	}
	return m
}

func (l Lease) memberArgs() []any {
	ms := l.members()
	a := make([]any, len(ms))
	for i, m := range ms {
		a[i] = m
	}
	return a
}

// Pod returns the pod the slot belongs to.
func (l Lease) Pod() string { return l.pod }

// Acquire takes a slot of pod's window if fewer than limit slots are live,
// counted over every replica, and reports whether it did. On ok the caller
// must call Release exactly once with the lease when the request ends.
//
// In shared mode that is one atomic Redis call. In local mode, or when the
// call fails, the decision is this replica's alone: ok while it holds fewer
// than max(1, ⌊Share(limit)⌋) slots for pod, those taken in shared mode
// included (see the package comment for how leases cross the switch). A
// limit ≤ 0 admits nothing. err is non-nil only when pod is empty or ctx
// ended; then ok is false.
func (c *Cluster) Acquire(ctx context.Context, pod string, limit int) (Lease, bool, error) {
	return c.AcquireN(ctx, pod, limit, 1)
}

// AcquireN is Acquire for a request that runs n sequences (n below 1 counts
// as 1): it takes n slots at once if they fit under limit with the live ones,
// or when none is live (a request above the whole window runs alone, as in
// the replica's own window, and takes the whole window: n above limit counts
// as limit, so a client's huge n costs no more than one window of members).
func (c *Cluster) AcquireN(ctx context.Context, pod string, limit, n int) (Lease, bool, error) {
	if pod == "" {
		return Lease{}, false, errors.New("cluster: Acquire: empty pod")
	}
	if err := ctx.Err(); err != nil {
		return Lease{}, false, fmt.Errorf("cluster: %w", err)
	}
	if limit <= 0 {
		return Lease{}, false, nil
	}
	l := Lease{pod: pod, id: c.s.ReplicaID + "/" + strconv.FormatUint(c.seq.Add(1), 36), n: min(max(n, 1), limit)}
	attempted := c.up.Load()
	if attempted {
		var res []int64
		err := c.call(ctx, func(ctx context.Context) error {
			var err error
			args := append([]any{c.nowArg(), c.s.LeaseTTL.Milliseconds(), limit}, l.memberArgs()...)
			res, err = c.scripts.acquire.Run(ctx, c.rdb, []string{c.leaseKey(pod)}, args...).Int64Slice()
			return err
		})
		switch {
		case err == nil && len(res) == 2:
			if res[0] != 1 {
				return Lease{}, false, nil
			}
			c.mu.Lock()
			c.hold(l, true)
			c.mu.Unlock()
			return l, true, nil
		case err != nil && !errors.Is(err, ErrUnavailable): // ctx ended
			c.mu.Lock()
			c.addPending(l) // Redis may have added it all the same
			c.mu.Unlock()
			return Lease{}, false, err
		}
		// Redis may have added the lease before the call failed: decide
		// locally below; if refused, the lease goes to pending and the next
		// heartbeat removes it.
	}
	return c.acquireLocal(l, limit, attempted)
}

// acquireLocal decides l against this replica's share of limit. written
// says whether a failed Redis call may have added l there.
func (c *Cluster) acquireLocal(l Lease, limit int, written bool) (Lease, bool, error) {
	share := max(1, int(math.Floor(c.Share(float64(limit)))))
	c.mu.Lock()
	defer c.mu.Unlock()
	if held := len(c.held[l.pod]); held > 0 && held+l.n > share {
		if written {
			c.addPending(l)
		}
		return Lease{}, false, nil
	}
	c.hold(l, written)
	return l, true, nil
}

// hold records l as live; written says whether it may be in Redis. The
// caller holds c.mu.
func (c *Cluster) hold(l Lease, written bool) {
	m := c.held[l.pod]
	if m == nil {
		m = make(map[string]bool)
		c.held[l.pod] = m
	}
	for _, id := range l.members() {
		m[id] = written
	}
}

// addPending queues l for removal by a heartbeat. The caller holds c.mu.
func (c *Cluster) addPending(l Lease) {
	if len(c.pending) < maxPending {
		c.pending = append(c.pending, l)
	}
}

// Release frees the slot l holds. Call it exactly once per lease that
// Acquire returned with ok; later calls, and the zero Lease, do nothing. It
// never fails: when Redis cannot be reached now (in local mode, or the call
// fails), the next heartbeat that reaches it removes the lease, and it
// expires within LeaseTTL in any case. ctx may be cancelled already (the
// client left): the release still runs, bounded by Settings.Timeout.
func (c *Cluster) Release(ctx context.Context, l Lease) {
	up := c.up.Load()
	c.mu.Lock()
	m := c.held[l.pod]
	ids := l.members()
	written, ok := m[ids[0]]
	if !ok {
		c.mu.Unlock()
		return
	}
	for _, id := range ids {
		written = written || m[id]
		delete(m, id)
	}
	if len(m) == 0 {
		delete(c.held, l.pod)
	}
	beating := c.beating > 0
	if written && (beating || !up) {
		// In local mode the next heartbeat removes it; while a heartbeat is
		// writing the held leases back, it may write l after our ZREM, so
		// it removes the pending ones once its write is done.
		c.addPending(l)
	}
	c.mu.Unlock()
	if !written || !up {
		return
	}
	err := c.call(context.WithoutCancel(ctx), func(ctx context.Context) error {
		return c.rdb.ZRem(ctx, c.leaseKey(l.pod), l.memberArgs()...).Err()
	})
	if err != nil && !beating {
		c.mu.Lock()
		c.addPending(l)
		c.mu.Unlock()
	}
}

// Count returns how many slots of pod's window are live, over all replicas,
// for observability. The error matches ErrUnavailable when Redis cannot
// answer; Count asks Redis even in local mode.
func (c *Cluster) Count(ctx context.Context, pod string) (int, error) {
	var n int64
	err := c.call(ctx, func(ctx context.Context) error {
		var err error
		n, err = c.scripts.count.Run(ctx, c.rdb, []string{c.leaseKey(pod)}, c.nowArg()).Int64()
		return err
	})
	return int(n), err
}

func (c *Cluster) leaseKey(pod string) string { return c.s.KeyPrefix + "lease:" + pod }
