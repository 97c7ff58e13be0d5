package decide

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Class is one traffic class as the handler places requests into it.
type Class struct {
	// Name labels the class in metrics, logs and /admin/state.
	Name string
	// Priority orders the queue (higher first); below 0 the class is
	// sheddable (refused with 503 shed_priority while its pods are degraded).
	Priority int
	// Routes are request paths that place a request here.
	Routes []string
	// ClientKeys are "sha256:<hex>" hashes of ClientKeyHeader values that
	// place a request here.
	ClientKeys []string
	// TTFTDeadline, above 0, replaces Policy.TTFTDeadline for the class.
	TTFTDeadline time.Duration
}

// sheddable reports whether the class is refused first under pressure.
func (c *Class) sheddable() bool { return c.Priority < 0 }

// Classes places requests into traffic classes. The zero value (no classes)
// places nothing: every request is alike. Immutable once built.
type Classes struct {
	// Header, if set, names a request header that may name the class.
	Header string
	// Default is the class of a request nothing else places.
	Default string
	// List holds the classes.
	List []Class

	byName  map[string]*Class
	byRoute map[string]*Class
	byKey   map[string]*Class
}

// compile indexes the lists; called once, by Policy.withDefaults.
func (cs *Classes) compile() {
	cs.byName, cs.byRoute, cs.byKey = map[string]*Class{}, map[string]*Class{}, map[string]*Class{}
	for i := range cs.List {
		c := &cs.List[i]
		cs.byName[c.Name] = c
		for _, r := range c.Routes {
			cs.byRoute[r] = c
		}
		for _, k := range c.ClientKeys {
			cs.byKey[k] = c
		}
	}
}

// place returns r's class: the header's, the client key's, the route's,
// else the default; nil when there are no classes.
func (cs *Classes) place(h Headers, path, clientKey string) *Class {
	if cs == nil || len(cs.List) == 0 {
		return nil
	}
	if cs.Header != "" {
		if c, ok := cs.byName[h.Get(cs.Header)]; ok {
			return c
		}
	}
	if clientKey != "" && len(cs.byKey) > 0 {
		sum := sha256.Sum256([]byte(clientKey))
		if c, ok := cs.byKey["sha256:"+hex.EncodeToString(sum[:])]; ok {
			return c
		}
	}
	if c, ok := cs.byRoute[path]; ok {
		return c
	}
	return cs.byName[cs.Default]
}

// ClassLimiter is the token bucket of each class that has one. Allow
// returns nil, or an error that implements RetryAfter() time.Duration. A
// call that asks another process (the cluster's Redis) ends when ctx does.
type ClassLimiter interface {
	Allow(ctx context.Context, class string) error
}

// ModelLimiter is the token bucket of each model that has one (the body's
// "model"). Allow returns nil, or an error that implements RetryAfter. A
// call that asks another process ends when ctx does.
type ModelLimiter interface {
	Allow(ctx context.Context, model string) error
}
