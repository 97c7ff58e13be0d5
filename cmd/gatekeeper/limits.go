package main

import (
	"sync/atomic"

	"github.com/gatekeeper-dev/gatekeeper/breaker"
	"github.com/gatekeeper-dev/gatekeeper/proxy"
)

var (
	_ proxy.ClassLimiter = (*keyedLimiter)(nil)
	_ proxy.ModelLimiter = (*keyedLimiter)(nil)
)

// keyedLimiter is the token bucket of each traffic class, or each model,
// that has a qps of its own. A reload keeps a key's bucket (and its tokens)
// while the key stays; safe for concurrent use.
type keyedLimiter struct {
	m atomic.Pointer[map[string]*breaker.Limiter]
}

// Allow takes a token from the key's bucket; a key without one passes.
func (c *keyedLimiter) Allow(key string) error {
	if m := c.m.Load(); m != nil {
		if l := (*m)[key]; l != nil {
			return l.Allow("")
		}
	}
	return nil
}

// checkLimits reports whether every key's settings make a limiter.
func checkLimits(s map[string]breaker.LimiterSettings) error {
	for _, ls := range s {
		if _, err := breaker.NewLimiter(ls); err != nil {
			return err
		}
	}
	return nil
}

// set installs the buckets for s, updating the ones that stay. s was
// checked with checkLimits: nothing fails.
func (c *keyedLimiter) set(s map[string]breaker.LimiterSettings) {
	old := map[string]*breaker.Limiter{}
	if m := c.m.Load(); m != nil {
		old = *m
	}
	next := make(map[string]*breaker.Limiter, len(s))
	for name, ls := range s {
		if l, ok := old[name]; ok && l.Update(ls) == nil {
			next[name] = l
			continue
		}
		next[name], _ = breaker.NewLimiter(ls)
	}
	c.m.Store(&next)
}
