package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"sync/atomic"

	"github.com/gatekeeper-dev/gatekeeper/breaker"
	"github.com/gatekeeper-dev/gatekeeper/cluster"
	"github.com/gatekeeper-dev/gatekeeper/proxy"
)

var (
	_ proxy.ClassLimiter = (*sharedKeyed)(nil)
	_ proxy.ModelLimiter = (*sharedKeyed)(nil)
)

// sharedKeyed is the token bucket of each traffic class, or each model,
// summed over every replica: one Redis bucket per key (a per-client bucket
// of the cluster's limiter under the key "class:NAME" or "model:SHA-256"),
// and this replica's share of it while Redis is unreachable. Safe for
// concurrent use; must not be copied.
type sharedKeyed struct {
	c    *cluster.Cluster
	kind string // "class" or "model"
	lims atomic.Pointer[map[string]*cluster.Limiter]

	// mu guards full; local is this replica's share of each bucket.
	mu    sync.Mutex
	full  map[string]breaker.LimiterSettings
	local breaker.LimiterSet
}

// set installs the buckets of m (checked with breaker.CheckLimiterSet).
func (k *sharedKeyed) set(sh *shared, m map[string]breaker.LimiterSettings) {
	lims := make(map[string]*cluster.Limiter, len(m))
	for key, ls := range m {
		l, err := k.c.NewLimiter(cluster.LimiterSettings{ClientQPS: ls.QPS, ClientBurst: ls.Burst})
		if err == nil { // the same rules as breaker's, checked in prepare
			lims[key] = l
		}
	}
	k.lims.Store(&lims)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.full = m
	k.reshare(sh)
}

// reshare sizes the local buckets at this replica's share; k.mu is held.
func (k *sharedKeyed) reshare(sh *shared) {
	shares := make(map[string]breaker.LimiterSettings, len(k.full))
	for key, ls := range k.full {
		shares[key] = sh.shareOf(ls)
	}
	_ = k.local.Set(shares)
}

// Allow takes a token of key's bucket over every replica; a key without a
// bucket passes.
func (k *sharedKeyed) Allow(key string) error {
	l := (*k.lims.Load())[key]
	if l == nil {
		return nil
	}
	sum := sha256.Sum256([]byte(key))
	d, err := l.Allow(context.Background(), k.kind+":"+hex.EncodeToString(sum[:]))
	switch {
	case err == nil && d.Allowed:
		return nil
	case err == nil:
		return retryIn(d.Wait)
	}
	return k.local.Allow(key) // Redis did not decide: this replica's share
}
