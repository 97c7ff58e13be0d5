package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// maxClientKey is the longest client key Allow accepts, in bytes.
const maxClientKey = 256

// limiterSettings are the rates of a shared Limiter, with the meaning of
// breaker.LimiterSettings: the zero value limits nothing.
type limiterSettings struct {
	// qps is the global rate in requests per second over all replicas. 0
	// means no global limit; otherwise a finite value > 0.
	qps float64
	// burst is the global bucket size in requests. 0 means max(1, ⌈QPS⌉);
	// otherwise ≥ 1. Ignored when QPS is 0.
	burst int
	// clientQPS is the rate per client key in requests per second over all
	// replicas. 0 turns per-client buckets off; otherwise a finite value > 0.
	clientQPS float64
	// clientBurst is the bucket size per client key. 0 means
	// max(1, ⌈ClientQPS⌉); otherwise ≥ 1. Ignored when ClientQPS is 0.
	clientBurst int
}

// bucket is one bucket's script arguments; interval "" means no limit.
type bucket struct {
	interval, burst string
	size            int // burst as a number
}

// limits is a validated LimiterSettings as script arguments.
type limits struct{ global, client bucket }

func (s limiterSettings) limits() (limits, error) {
	var errs []error
	bad := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("cluster: LimiterSettings.%s = %v, want %s", field, v, want))
	}
	if !(s.qps >= 0) || math.IsInf(s.qps, 0) { // NaN fails s.QPS >= 0
		bad("QPS", s.qps, "a finite value ≥ 0")
	}
	if s.burst < 0 {
		bad("Burst", s.burst, "≥ 0")
	}
	if !(s.clientQPS >= 0) || math.IsInf(s.clientQPS, 0) {
		bad("ClientQPS", s.clientQPS, "a finite value ≥ 0")
	}
	if s.clientBurst < 0 {
		bad("ClientBurst", s.clientBurst, "≥ 0")
	}
	if len(errs) > 0 {
		return limits{}, errors.Join(errs...)
	}
	return limits{global: newBucket(s.qps, s.burst), client: newBucket(s.clientQPS, s.clientBurst)}, nil
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
		size:     burst,
	}
}

// limiter is the fast breaker shared by the replicas: a global token bucket
// and optional buckets per client key, kept in Redis (a GCRA on Redis's
// clock). A replica takes tokens from a bucket in batches (see reservoir)
// and admits from its batch without asking Redis, so a steady stream of
// requests costs one Redis call per batch, not per request. Client buckets
// expire from Redis once full again. Create one with Cluster.NewLimiter.
// Safe for concurrent use; must not be copied.
type limiter struct {
	c      *Cluster
	limits atomic.Pointer[limits]
	global reservoir
	// mu guards clients: the batch of each client key, at most
	// maxReservoirs of them.
	mu      sync.Mutex
	clients map[string]*reservoir
}

// newLimiter returns a Limiter on c's Redis for s, or an error naming each
// invalid field. Limiters of one Cluster share their buckets: build one.
func (c *Cluster) newLimiter(s limiterSettings) (*limiter, error) {
	lim, err := s.limits()
	if err != nil {
		return nil, err
	}
	l := &limiter{c: c, clients: make(map[string]*reservoir)}
	l.limits.Store(&lim)
	return l, nil
}

// Update applies reloaded rates from the next decision on. What a bucket
// holds carries over as a time debt: no bucket is refilled or emptied;
// batches already taken are used up. On error nothing changes.
func (l *limiter) Update(s limiterSettings) error {
	lim, err := s.limits()
	if err != nil {
		return err
	}
	l.limits.Store(&lim)
	return nil
}

// decision is the outcome of Allow.
type decision struct {
	// allowed reports whether the request may pass; it took a token from
	// every bucket it is subject to.
	allowed bool
	// client reports that the client's bucket refused (else the global one
	// did). Meaningful when Allowed is false.
	client bool
	// wait is how long until the refusing bucket holds a token, unrounded
	// (a Retry-After header rounds it up to whole seconds, at least 1).
	// Positive when Allowed is false.
	wait time.Duration
}

// Allow decides whether one request from clientKey may pass now, over all
// replicas. clientKey identifies the client and is stored in Redis as is:
// pass a hash that is the same on every replica (hex of a SHA-256, not a
// per-process maphash) and never the raw credential. An empty key, or
// per-client buckets turned off, uses only the global bucket; a key longer
// than MaxClientKey is an error. A refusal takes no token from any bucket.
//
// The error matches ErrUnavailable when Redis did not decide (local mode, or
// the call failed or timed out) and this replica's batches could not: the
// caller then decides with its own limiter at its share (see Cluster.Share
// and the package comment). It is ctx's error when ctx ended first.
func (l *limiter) Allow(ctx context.Context, clientKey string) (decision, error) {
	if len(clientKey) > maxClientKey {
		return decision{}, fmt.Errorf("cluster: Allow: client key of %d bytes, want ≤ %d", len(clientKey), maxClientKey)
	}
	lim := l.limits.Load()
	if lim.global.interval == "" && (clientKey == "" || lim.client.interval == "") {
		return decision{allowed: true}, nil
	}
	if !l.c.up.Load() { // one bucket decides each request: the caller's own now
		return decision{}, errUnavailable
	}
	var client *reservoir
	if clientKey != "" && lim.client.interval != "" {
		client = l.clientReservoir(clientKey)
		// A client bucket known empty refuses before the global one is
		// asked, so nothing is taken for a request that cannot pass.
		if d, refused := client.knownEmpty(l.c.now()); refused {
			d.client = true
			return d, nil
		}
	}
	// The global token first, given back when the client's bucket refuses:
	// no lock is held across two Redis calls.
	var gen uint64
	if lim.global.interval != "" {
		var d decision
		var err error
		if d, gen, err = l.take(ctx, &l.global, "rate:global", lim.global); err != nil || !d.allowed {
			return d, err
		}
	}
	if client != nil {
		d, _, err := l.take(ctx, client, "rate:client:"+clientKey, lim.client)
		if err != nil || !d.allowed {
			if lim.global.interval != "" {
				l.global.giveBack(gen)
			}
			d.client = true
			return d, err
		}
	}
	return decision{allowed: true}, nil
}

// take takes one token of r's batch, taking a batch from Redis first when
// r's own ran out or went stale. It returns the batch's generation, for
// giveBack.
func (l *limiter) take(ctx context.Context, r *reservoir, key string, b bucket) (decision, uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, err := l.ensure(ctx, r, key, b)
	if err == nil && d.allowed {
		r.tokens--
	}
	return d, r.gen, err
}

// clientReservoir returns clientKey's batch, a new one when there is room,
// or a throwaway one (a batch of one, no memory) when maxReservoirs are
// live.
func (l *limiter) clientReservoir(clientKey string) *reservoir {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.clients[clientKey]; r != nil {
		return r
	}
	if len(l.clients) >= maxReservoirs {
		now := l.c.now()
		for k, r := range l.clients {
			if r.idle(now) {
				delete(l.clients, k)
			}
		}
		if len(l.clients) >= maxReservoirs {
			return &reservoir{single: true}
		}
	}
	r := &reservoir{}
	l.clients[clientKey] = r
	return r
}

// ensure makes r hold a token for one request, taking a batch from Redis
// when its own ran out or went stale: Allowed, a refusal with the wait, or
// an error. r.mu is held (a batch is taken once, however many wait on it).
func (l *limiter) ensure(ctx context.Context, r *reservoir, key string, b bucket) (decision, error) {
	c := l.c
	now := c.now()
	if d, refused := r.emptyLocked(now); refused {
		return d, nil
	}
	if r.tokens > 0 && now.Before(r.staleAt) {
		return decision{allowed: true}, nil
	}
	want := r.nextBatch(now, max(1, b.size/max(1, c.LastReplicas())))
	var res []int64
	err := c.call(ctx, func(ctx context.Context) error {
		var err error
		res, err = c.scripts.take.Run(ctx, c.rdb, []string{c.s.KeyPrefix + key},
			c.nowArg(), b.interval, b.burst, want).Int64Slice()
		return err
	})
	if err == nil && (len(res) != 2 || res[0] < 0 || res[0] > int64(want)) {
		err = &unavailableError{cause: fmt.Errorf("take script returned %v", res)}
	}
	if err != nil {
		return decision{}, err
	}
	if res[0] == 0 {
		wait := max(time.Microsecond, time.Duration(res[1])*time.Microsecond)
		r.emptyUntil = now.Add(wait)
		return decision{wait: wait}, nil
	}
	r.fill(now, int(res[0]))
	return decision{allowed: true}, nil
}

// maxReservoirs bounds the client batches a Limiter keeps.
const maxReservoirs = 10000

// tokenHold is how long a batch of tokens may be used: tokens not used by
// then are dropped, so a batch taken ahead admits nothing later than this
// after the bucket held it.
const tokenHold = 250 * time.Millisecond

// reservoir is one bucket's batch of tokens on this replica: tokens taken
// from Redis ahead and not used yet. Its size follows use: it doubles
// (up to this replica's share of the burst) when a batch runs out before
// it goes stale, and shrinks to what was used when one goes stale, so a
// bucket that sees a request now and then takes one token at a time.
type reservoir struct {
	mu         sync.Mutex
	tokens     int       // left of the batch
	taken      int       // the batch's size
	staleAt    time.Time // the batch is dropped then
	emptyUntil time.Time // Redis said the bucket holds no token before then
	gen        uint64    // counts the batches
	single     bool      // a throwaway: always a batch of one
}

// nextBatch is the size of the batch to take now, at most most.
func (r *reservoir) nextBatch(now time.Time, most int) int {
	n := 1
	switch {
	case r.single || r.taken == 0:
	case r.tokens == 0 && now.Before(r.staleAt): // ran out while fresh
		n = 2 * r.taken
	default: // went stale with tokens left
		n = r.taken - r.tokens
	}
	return min(max(n, 1), most)
}

// fill installs a batch of n tokens taken at now.
func (r *reservoir) fill(now time.Time, n int) {
	r.tokens, r.taken, r.staleAt = n, n, now.Add(tokenHold)
	r.gen++
}

// knownEmpty reports a refusal when Redis said r's bucket holds no token
// before a time still ahead.
func (r *reservoir) knownEmpty(now time.Time) (decision, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.emptyLocked(now)
}

// emptyLocked is knownEmpty with r.mu held.
func (r *reservoir) emptyLocked(now time.Time) (decision, bool) {
	if now.Before(r.emptyUntil) {
		return decision{wait: r.emptyUntil.Sub(now)}, true
	}
	return decision{}, false
}

// giveBack returns a token taken from batch gen, unless another batch
// replaced it since.
func (r *reservoir) giveBack(gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen == gen && r.tokens < r.taken {
		r.tokens++
	}
}

// idle reports whether r holds nothing worth keeping at now.
func (r *reservoir) idle(now time.Time) bool {
	return !now.Before(r.staleAt) && !now.Before(r.emptyUntil)
}
