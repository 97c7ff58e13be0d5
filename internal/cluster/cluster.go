package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// errUnavailable matches the error of a call that could not be decided
// through Redis: the Cluster is in local mode, or the call failed or timed
// out. The caller decides that request locally, at its share (see Share).
var errUnavailable = errors.New("cluster: redis unavailable")

// Cluster is one replica's handle on the state the replicas share through
// Redis: token buckets (NewLimiter), window leases (Acquire, Release) and the
// replica count (Run, Share). Create one with New, start Run, and Close it
// when done. Safe for concurrent use; must not be copied.
type Cluster struct {
	s       Settings
	rdb     *redis.Client
	scripts scripts
	running atomic.Bool
	// up is the mode (true: shared); failures counts consecutive failed calls.
	up       atomic.Bool
	failures atomic.Int64
	replicas atomic.Int64 // the last known replica count, ≥ 1

	beatMu  sync.Mutex // serializes Beat; guards beatSeq
	beatSeq int64      // the last beat's number (beatScript refuses a late one)

	// notifyMu serializes OnChange calls; notified is the mode last reported.
	notifyMu sync.Mutex
	notified bool

	sh shares // the lease on each pod's window
}

// New returns a Cluster for s, or an error naming each invalid field. It
// does not contact Redis: the Cluster starts in local mode and switches to
// shared mode at the first heartbeat that succeeds (Run's first act, or
// Beat).
func New(s Settings) (*Cluster, error) {
	s, opt, err := s.normalized()
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		s:       s,
		rdb:     redis.NewClient(opt),
		scripts: newScripts(),
	}
	c.sh.pods = make(map[string]*share)
	c.sh.renewed = c.now() // a lease that never answers lapses LeaseTTL/2 after start
	c.replicas.Store(int64(s.Replicas))
	return c, nil
}

// Close closes the connections to Redis. Calls after Close fail like calls
// to an unreachable Redis. Run's end withdraws the leases first; without it
// they expire within LeaseTTL.
func (c *Cluster) Close() error {
	if err := c.rdb.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("cluster: close: %w", err)
	}
	return nil
}

// ReplicaID returns the id this replica announces.
func (c *Cluster) ReplicaID() string { return c.s.ReplicaID }

// Up reports whether the Cluster is in shared mode: its last heartbeat
// succeeded and fewer than DownAfter calls failed in a row since.
func (c *Cluster) Up() bool { return c.up.Load() }

// Share returns this replica's share of limit: limit divided by the last
// known number of live replicas (Settings.Replicas before the first
// heartbeat), never by less than 1. The count cannot change while Redis is
// unreachable, so in local mode Share is stable.
func (c *Cluster) Share(limit float64) float64 {
	return limit / float64(max(1, c.replicas.Load()))
}

// call runs f under Settings.Timeout and keeps the mode: a failure counts
// towards DownAfter, a success resets the count. An error of the caller's own
// context is returned as is, wrapped, and counts for nothing: a client that
// left (a request's ctx cancelled) is no Redis outage and never puts the
// replica in local mode. Any other error becomes one that matches
// ErrUnavailable.
//
// call returns as soon as ctx ends, even while f still waits for Redis's
// answer (go-redis's reads end at the context's deadline, not at its
// cancellation): f then runs on in the background until its answer or
// Timeout, and what it returns is dropped. So f must write what it reads
// only where the caller looks after a nil error.
func (c *Cluster) call(ctx context.Context, f func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, c.s.Timeout)
	err := runUntil(ctx, cctx, f)
	cancel()
	if err == nil {
		if c.failures.Load() != 0 {
			c.failures.Store(0)
		}
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("cluster: %w", ctx.Err())
	}
	if c.failures.Add(1) >= int64(c.s.DownAfter) && c.up.CompareAndSwap(true, false) {
		c.notify()
	}
	return &unavailableError{cause: err}
}

// runUntil runs f(cctx) and returns its error, or ctx's as soon as ctx
// ends first (f goes on in its own goroutine, bounded by cctx's deadline).
// A ctx that never ends (context.Background, context.WithoutCancel) runs f
// in the caller's goroutine.
func runUntil(ctx, cctx context.Context, f func(context.Context) error) error {
	if ctx.Done() == nil {
		return f(cctx)
	}
	if err := ctx.Err(); err != nil { // the client left before the call
		return err
	}
	done := make(chan error, 1)
	go func() { done <- f(cctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		select {
		case err := <-done: // f answered meanwhile: its answer stands
			return err
		default:
			return ctx.Err()
		}
	}
}

// unavailableError is a failed call. It matches ErrUnavailable but does not
// unwrap to its cause: a timeout here must not read as the caller's own
// deadline (context.DeadlineExceeded) to code that maps errors to statuses.
type unavailableError struct{ cause error }

func (e *unavailableError) Error() string        { return errUnavailable.Error() + ": " + e.cause.Error() }
func (e *unavailableError) Is(target error) bool { return target == errUnavailable }

// notify reports the current mode to OnChange if it differs from the mode
// last reported. Serialized, so reports alternate and end at the current
// mode even when two switches race.
func (c *Cluster) notify() {
	if c.s.OnChange == nil {
		return
	}
	c.notifyMu.Lock()
	defer c.notifyMu.Unlock()
	up := c.up.Load()
	if up == c.notified {
		return
	}
	c.notified = up
	c.s.OnChange(up)
}

// now is Settings.Now, or the local clock.
func (c *Cluster) now() time.Time {
	if c.s.Now != nil {
		return c.s.Now()
	}
	return time.Now()
}

// nowArg is the first argument of every script: the time from Settings.Now
// in µs, or "" for Redis's clock.
func (c *Cluster) nowArg() string {
	if c.s.Now == nil {
		return ""
	}
	return strconv.FormatInt(c.s.Now().UnixMicro(), 10)
}

// Snapshot is a Cluster's state at one instant, for /admin/state and gauges.
type Snapshot struct {
	// Up is the mode: true when shared through Redis.
	Up bool `json:"up"`
	// ReplicaID is the id this replica announces.
	ReplicaID string `json:"replica_id"`
	// Replicas is the last known number of live replicas.
	Replicas int `json:"replicas"`
	// Shares is this replica's lease on each pod's window.
	Shares map[string]PodShare `json:"shares"`
	// Lapsed reports that no renewal answered for LeaseTTL/2: every share
	// is at its floor.
	Lapsed bool `json:"lapsed"`
}

// Snapshot returns the current state. It does no I/O.
func (c *Cluster) Snapshot() Snapshot {
	s := Snapshot{
		Up:        c.up.Load(),
		ReplicaID: c.s.ReplicaID,
		Replicas:  int(c.replicas.Load()),
		Shares:    make(map[string]PodShare),
	}
	c.sh.mu.Lock()
	defer c.sh.mu.Unlock()
	for pod, p := range c.sh.pods {
		s.Shares[pod] = PodShare{Base: p.base, Grant: p.grant, Cap: p.cap, Wants: p.wants}
	}
	s.Lapsed = c.sh.lapsed
	return s
}
