package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"
)

// MaxClientKey is the longest client key Allow accepts, in bytes.
const MaxClientKey = 256

// LimiterSettings are the rates of a shared Limiter, with the meaning of
// breaker.LimiterSettings: the zero value limits nothing.
type LimiterSettings struct {
	// QPS is the global rate in requests per second over all replicas. 0
	// means no global limit; otherwise a finite value > 0.
	QPS float64
	// Burst is the global bucket size in requests. 0 means max(1, ⌈QPS⌉);
	// otherwise ≥ 1. Ignored when QPS is 0.
	Burst int
	// ClientQPS is the rate per client key in requests per second over all
	// replicas. 0 turns per-client buckets off; otherwise a finite value > 0.
	ClientQPS float64
	// ClientBurst is the bucket size per client key. 0 means
	// max(1, ⌈ClientQPS⌉); otherwise ≥ 1. Ignored when ClientQPS is 0.
	ClientBurst int
}

// bucket is one bucket's script arguments; interval "" means no limit.
type bucket struct{ interval, burst string }

// limits is a validated LimiterSettings as script arguments.
type limits struct{ global, client bucket }

func (s LimiterSettings) limits() (limits, error) {
	var errs []error
	bad := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("cluster: LimiterSettings.%s = %v, want %s", field, v, want))
	}
	if !(s.QPS >= 0) || math.IsInf(s.QPS, 0) { // NaN fails s.QPS >= 0
		bad("QPS", s.QPS, "a finite value ≥ 0")
	}
	if s.Burst < 0 {
		bad("Burst", s.Burst, "≥ 0")
	}
	if !(s.ClientQPS >= 0) || math.IsInf(s.ClientQPS, 0) {
		bad("ClientQPS", s.ClientQPS, "a finite value ≥ 0")
	}
	if s.ClientBurst < 0 {
		bad("ClientBurst", s.ClientBurst, "≥ 0")
	}
	if len(errs) > 0 {
		return limits{}, errors.Join(errs...)
	}
	return limits{global: newBucket(s.QPS, s.Burst), client: newBucket(s.ClientQPS, s.ClientBurst)}, nil
}

func newBucket(qps float64, burst int) bucket {
	if qps == 0 {
		return bucket{}
	}
	if burst == 0 {
		burst = max(1, int(math.Min(math.Ceil(qps), math.MaxInt32)))
	}
	return bucket{
		interval: strconv.FormatFloat(1e6/qps, 'g', -1, 64), // µs between tokens
		burst:    strconv.Itoa(burst),
	}
}

// Limiter is the fast breaker shared by the replicas: a global token bucket
// and optional buckets per client key, kept in Redis and decided by one
// atomic call per request (a GCRA, on Redis's clock). Client buckets expire
// from Redis once full again, so nothing here needs evicting. Create one
// with Cluster.NewLimiter. Safe for concurrent use; must not be copied.
type Limiter struct {
	c      *Cluster
	limits atomic.Pointer[limits]
}

// NewLimiter returns a Limiter on c's Redis for s, or an error naming each
// invalid field. Limiters of one Cluster share their buckets: build one.
func (c *Cluster) NewLimiter(s LimiterSettings) (*Limiter, error) {
	lim, err := s.limits()
	if err != nil {
		return nil, err
	}
	l := &Limiter{c: c}
	l.limits.Store(&lim)
	return l, nil
}

// Update applies reloaded rates from the next decision on. What a bucket
// holds carries over as a time debt: no bucket is refilled or emptied. On
// error nothing changes.
func (l *Limiter) Update(s LimiterSettings) error {
	lim, err := s.limits()
	if err != nil {
		return err
	}
	l.limits.Store(&lim)
	return nil
}

// Decision is the outcome of Allow.
type Decision struct {
	// Allowed reports whether the request may pass; it took a token from
	// every bucket it is subject to.
	Allowed bool
	// Client reports that the client's bucket refused (else the global one
	// did). Meaningful when Allowed is false.
	Client bool
	// Wait is how long until the refusing bucket holds a token, unrounded
	// (a Retry-After header rounds it up to whole seconds, at least 1).
	// Positive when Allowed is false.
	Wait time.Duration
}

// Allow decides whether one request from clientKey may pass now, over all
// replicas. clientKey identifies the client and is stored in Redis as is:
// pass a hash that is the same on every replica (hex of a SHA-256, not a
// per-process maphash) and never the raw credential. An empty key, or
// per-client buckets turned off, uses only the global bucket; a key longer
// than MaxClientKey is an error. A refusal takes no token from any bucket.
//
// The error matches ErrUnavailable when Redis did not decide (local mode, or
// the call failed or timed out): the caller then decides with its own
// limiter at its share (see Cluster.Share and the package comment). It is
// ctx's error when ctx ended first.
func (l *Limiter) Allow(ctx context.Context, clientKey string) (Decision, error) {
	if len(clientKey) > MaxClientKey {
		return Decision{}, fmt.Errorf("cluster: Allow: client key of %d bytes, want ≤ %d", len(clientKey), MaxClientKey)
	}
	lim := l.limits.Load()
	c := l.c
	keys := make([]string, 0, 2)
	args := make([]any, 1, 5)
	args[0] = c.nowArg()
	if clientKey != "" && lim.client.interval != "" {
		keys = append(keys, c.s.KeyPrefix+"rate:client:"+clientKey)
		args = append(args, lim.client.interval, lim.client.burst)
	}
	if lim.global.interval != "" {
		keys = append(keys, c.s.KeyPrefix+"rate:global")
		args = append(args, lim.global.interval, lim.global.burst)
	}
	if len(keys) == 0 {
		return Decision{Allowed: true}, nil
	}
	if !c.up.Load() {
		return Decision{}, ErrUnavailable
	}
	var res []int64
	err := c.call(ctx, func(ctx context.Context) error {
		var err error
		res, err = c.scripts.limit.Run(ctx, c.rdb, keys, args...).Int64Slice()
		return err
	})
	if err != nil {
		return Decision{}, err
	}
	if len(res) != 3 || res[0] != 1 && (res[1] < 1 || res[1] > int64(len(keys))) {
		return Decision{}, &unavailableError{cause: fmt.Errorf("limit script returned %v", res)}
	}
	if res[0] == 1 {
		return Decision{Allowed: true}, nil
	}
	refused := keys[res[1]-1]
	return Decision{
		Client: refused != c.s.KeyPrefix+"rate:global",
		Wait:   max(time.Microsecond, time.Duration(res[2])*time.Microsecond),
	}, nil
}
