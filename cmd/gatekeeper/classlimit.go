package main

import (
	"sync/atomic"

	"github.com/gatekeeper-dev/gatekeeper/breaker"
	"github.com/gatekeeper-dev/gatekeeper/proxy"
)

var _ proxy.ClassLimiter = (*classLimiter)(nil)

// classLimiter is the token bucket of each traffic class that has its own
// qps. A reload keeps a class's bucket (and its tokens) while the class
// stays; safe for concurrent use.
type classLimiter struct {
	m atomic.Pointer[map[string]*breaker.Limiter]
}

// Allow takes a token from the class's bucket; a class without one passes.
func (c *classLimiter) Allow(class string) error {
	if m := c.m.Load(); m != nil {
		if l := (*m)[class]; l != nil {
			return l.Allow("")
		}
	}
	return nil
}

// checkClassLimits reports whether every class's settings make a limiter.
func checkClassLimits(s map[string]breaker.LimiterSettings) error {
	for _, ls := range s {
		if _, err := breaker.NewLimiter(ls); err != nil {
			return err
		}
	}
	return nil
}

// set installs the buckets for s, updating the ones that stay. s was
// checked with checkClassLimits: nothing fails.
func (c *classLimiter) set(s map[string]breaker.LimiterSettings) {
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
