package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
)

// GateSettings configures a Gate.
type GateSettings struct {
	// Limits are the policy's fast breaker limits, summed over every
	// replica. The zero value limits nothing. MaxClients, IdleAfter and Now
	// apply to the fallback bucket only.
	Limits breaker.LimiterSettings
}

// Gate is the request path's view of a Cluster's buckets: the fast
// breaker's and each traffic class's and model's own (Classes, Models), all
// summed over every replica through Redis, and this replica's share of each
// while Redis is unreachable. (Windows are not here: admission decides them
// locally against the lease, see Cluster.Scale.) Its Allow methods
// return nil or an error with a RetryAfter() time.Duration method.
//
// The Cluster's Settings.OnChange must call Reshare when it reports false,
// so the fallback buckets follow the replica count last seen alive. Create
// one with Cluster.NewGate. Safe for concurrent use; must not be copied.
type Gate struct {
	c   *Cluster
	lim *limiter
	// classes and models are the traffic classes' and models' own buckets.
	classes, models *Keyed

	// mu guards full and local: the policy's limits and the fallback bucket
	// at this replica's share of them.
	mu    sync.Mutex
	full  breaker.LimiterSettings
	local *breaker.Limiter
}

// NewGate returns a Gate on c for s, or an error naming each invalid field.
// It has no class or model bucket until SetKeyed.
func (c *Cluster) NewGate(s GateSettings) (*Gate, error) {
	g := &Gate{c: c, full: s.Limits,
		classes: &Keyed{c: c, kind: "class"}, models: &Keyed{c: c, kind: "model"}}
	var err error
	if g.lim, err = c.newLimiter(sharedLimits(s.Limits)); err != nil {
		return nil, err
	}
	if g.local, err = breaker.NewLimiter(shareOf(c, s.Limits)); err != nil {
		return nil, err
	}
	return g, nil
}

// sharedLimits maps the policy's limits onto a shared Limiter's.
func sharedLimits(l breaker.LimiterSettings) limiterSettings {
	return limiterSettings{qps: l.QPS, burst: l.Burst, clientQPS: l.ClientQPS, clientBurst: l.ClientBurst}
}

// shareOf is this replica's part of l: rates and bursts divided by the
// replicas last seen alive (see Cluster.Share), at least one token per
// bucket that has a burst.
func shareOf(c *Cluster, l breaker.LimiterSettings) breaker.LimiterSettings {
	burst := func(b int) int {
		if b == 0 {
			return 0
		}
		return max(1, int(math.Ceil(c.Share(float64(b)))))
	}
	l.QPS, l.ClientQPS = c.Share(l.QPS), c.Share(l.ClientQPS)
	l.Burst, l.ClientBurst = burst(l.Burst), burst(l.ClientBurst)
	return l
}

// retryIn is a shared bucket's refusal: wait this long before trying again.
type retryIn time.Duration

func (r retryIn) Error() string { return "cluster: rate limited" }

// RetryAfter is how long until the refusing bucket holds a token.
func (r retryIn) RetryAfter() time.Duration { return time.Duration(r) }

// Allow takes a token for one request from clientKey over every replica:
// from Redis's buckets while it answers, from this replica's share
// otherwise. clientKey is the raw value that identifies the client; only its
// SHA-256 reaches Redis. It returns nil, or an error with RetryAfter.
//
// ctx is the request's: the Redis call ends when it does (and within
// Settings.Timeout). A request whose ctx ended is decided locally, like one
// Redis did not answer, but its end does not count as a Redis failure (see
// Cluster.call): a client that leaves never puts the replica in local mode.
func (g *Gate) Allow(ctx context.Context, clientKey string) error {
	key := ""
	if clientKey != "" {
		sum := sha256.Sum256([]byte(clientKey))
		key = hex.EncodeToString(sum[:])
	}
	d, err := g.lim.Allow(ctx, key)
	switch {
	case err == nil && d.allowed:
		return nil
	case err == nil:
		return retryIn(d.wait)
	}
	// Redis did not decide (ErrUnavailable, ctx's end, or any other error):
	// decide locally.
	g.mu.Lock()
	l := g.local
	g.mu.Unlock()
	return l.Allow(ctx, clientKey)
}

// Classes returns the traffic classes' own buckets.
func (g *Gate) Classes() *Keyed { return g.classes }

// Models returns the models' own buckets.
func (g *Gate) Models() *Keyed { return g.models }

// Update applies a reloaded policy's limits from the next decision on. On
// error nothing changes.
func (g *Gate) Update(l breaker.LimiterSettings) error {
	if _, err := breaker.NewLimiter(l); err != nil {
		return err
	}
	if err := g.lim.Update(sharedLimits(l)); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.full = l
	return g.local.Update(shareOf(g.c, l))
}

// SetKeyed installs the class and model buckets (at start and on every
// reload): one per key, with that key's QPS and Burst over every replica. On
// error (see breaker.CheckLimiterSet) nothing changes.
func (g *Gate) SetKeyed(classes, models map[string]breaker.LimiterSettings) error {
	if err := errors.Join(breaker.CheckLimiterSet(classes), breaker.CheckLimiterSet(models)); err != nil {
		return err
	}
	g.classes.set(classes)
	g.models.set(models)
	return nil
}

// Reshare resizes every fallback bucket at this replica's share of the
// policy's limits, by the replica count last seen alive. Call it when the
// Cluster switches to local mode (OnChange(false)): the count cannot change
// until it switches back.
func (g *Gate) Reshare() {
	g.mu.Lock()
	_ = g.local.Update(shareOf(g.c, g.full)) // validated when set
	g.mu.Unlock()
	g.classes.reshare()
	g.models.reshare()
}
