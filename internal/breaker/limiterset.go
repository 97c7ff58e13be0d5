package breaker

import (
	"context"
	"sync"
	"sync/atomic"
)

// LimiterSet holds one Limiter per key (a traffic class, a model) and keeps
// a key's Limiter, with the tokens left in its buckets, across Set calls
// while the key stays, so a reload refills nothing. The zero value holds no
// keys and is ready to use. Safe for concurrent use; must not be copied.
type LimiterSet struct {
	// m is read on every request without a lock; Set replaces it whole.
	m atomic.Pointer[map[string]*Limiter]
	// mu serialises Set, so two calls never build from the same old map.
	mu sync.Mutex
}

// CheckLimiterSet reports whether every key's settings make a Limiter: nil,
// or the first error NewLimiter returns (it names the invalid fields).
func CheckLimiterSet(s map[string]LimiterSettings) error {
	for _, ls := range s {
		if _, err := NewLimiter(ls); err != nil {
			return err
		}
	}
	return nil
}

// Allow takes a token from key's Limiter (its client key is ""), returning
// its *LimitError when the bucket is empty; a key without a Limiter passes.
// ctx is not used (see Limiter.Allow).
func (ls *LimiterSet) Allow(ctx context.Context, key string) error {
	if m := ls.m.Load(); m != nil {
		if l := (*m)[key]; l != nil {
			return l.Allow(ctx, "")
		}
	}
	return nil
}

// Set installs a Limiter for each key of s: a key that stays keeps its
// Limiter, updated to the new settings; a new key gets a fresh one (full
// buckets); a key not in s is dropped, so it passes from now on. s is
// checked whole first (CheckLimiterSet): on error nothing changes.
func (ls *LimiterSet) Set(s map[string]LimiterSettings) error {
	if err := CheckLimiterSet(s); err != nil {
		return err
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	old := map[string]*Limiter{}
	if m := ls.m.Load(); m != nil {
		old = *m
	}
	next := make(map[string]*Limiter, len(s))
	for name, st := range s {
		if l, ok := old[name]; ok && l.Update(st) == nil {
			next[name] = l
			continue
		}
		next[name], _ = NewLimiter(st) // checked above: cannot fail
	}
	ls.m.Store(&next)
	return nil
}
