package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"sync/atomic"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
)

// Keyed is the token bucket of each traffic class, or each model, summed
// over every replica: one Redis bucket per key (a client bucket of a shared
// Limiter, under the client key "class:" or "model:" followed by the hex
// SHA-256 of the key), and this replica's share of it while Redis is
// unreachable. Get one from Gate.Classes or Gate.Models; it has no bucket
// until Gate.SetKeyed. Safe for concurrent use; must not be copied.
type Keyed struct {
	c    *Cluster
	kind string // "class" or "model"
	lims atomic.Pointer[map[string]*limiter]

	// mu guards full: the settings of each key over every replica. local
	// (its own lock) holds this replica's share of each bucket.
	mu    sync.Mutex
	full  map[string]breaker.LimiterSettings
	local breaker.LimiterSet
}

// set installs the buckets of m (checked with breaker.CheckLimiterSet).
func (k *Keyed) set(m map[string]breaker.LimiterSettings) {
	lims := make(map[string]*limiter, len(m))
	for key, ls := range m {
		l, err := k.c.newLimiter(limiterSettings{clientQPS: ls.QPS, clientBurst: ls.Burst})
		if err == nil { // the same rules as breaker's, checked by the caller
			lims[key] = l
		}
	}
	k.lims.Store(&lims)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.full = m
	k.reshareLocked()
}

// reshare sizes the local buckets at this replica's share.
func (k *Keyed) reshare() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reshareLocked()
}

// reshareLocked is reshare; k.mu is held.
func (k *Keyed) reshareLocked() {
	shares := make(map[string]breaker.LimiterSettings, len(k.full))
	for key, ls := range k.full {
		shares[key] = shareOf(k.c, ls)
	}
	_ = k.local.Set(shares) // checked when set
}

// Allow takes a token of key's bucket over every replica (this replica's
// share while Redis does not decide); a key without a bucket passes. It
// returns nil, or an error with RetryAfter. ctx is the request's, as in
// Gate.Allow: the Redis call ends with it, and its end is no Redis failure.
func (k *Keyed) Allow(ctx context.Context, key string) error {
	m := k.lims.Load()
	if m == nil {
		return nil
	}
	l := (*m)[key]
	if l == nil {
		return nil
	}
	sum := sha256.Sum256([]byte(key))
	d, err := l.Allow(ctx, k.kind+":"+hex.EncodeToString(sum[:]))
	switch {
	case err == nil && d.allowed:
		return nil
	case err == nil:
		return retryIn(d.wait)
	}
	return k.local.Allow(ctx, key) // Redis did not decide: this replica's share
}
