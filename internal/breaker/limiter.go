package breaker

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"time"

	"golang.org/x/time/rate"
)

// Limiter defaults.
const (
	defaultMaxClients = 10000
	defaultIdleAfter  = 10 * time.Minute
)

// LimiterSettings configures a Limiter. The zero value limits nothing.
type LimiterSettings struct {
	// QPS is the global rate in requests per second. 0 means no global
	// limit; otherwise a finite value > 0 (fractions allowed: 0.5 is one
	// request every two seconds).
	QPS float64
	// Burst is the global bucket size in requests: how many may pass at once
	// after a quiet spell. 0 means one second's worth, max(1, ⌈QPS⌉);
	// otherwise ≥ 1. Ignored when QPS is 0.
	Burst int
	// ClientQPS is the rate per client key in requests per second. 0 turns
	// per-client buckets off; otherwise a finite value > 0.
	ClientQPS float64
	// ClientBurst is the bucket size per client key. 0 means
	// max(1, ⌈ClientQPS⌉); otherwise ≥ 1. Ignored when ClientQPS is 0.
	ClientBurst int
	// MaxClients bounds how many client buckets are kept; when full, the
	// least recently used one is evicted (that client starts again with a
	// full bucket). 0 means DefaultMaxClients; otherwise ≥ 1.
	MaxClients int
	// IdleAfter evicts a client bucket not used for this long. Pick it no
	// shorter than ClientBurst/ClientQPS (the time to refill), so evicting
	// forgets nothing. 0 means DefaultIdleAfter; otherwise > 0.
	IdleAfter time.Duration
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
}

// normalized checks s and returns a copy with the defaults filled in. The
// error joins one problem per invalid field, each naming the field.
func (s LimiterSettings) normalized() (LimiterSettings, error) {
	var errs []error
	bad := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("breaker: LimiterSettings.%s = %v, want %s", field, v, want))
	}
	if !validRate(s.QPS) {
		bad("QPS", s.QPS, "a finite value ≥ 0")
	}
	if s.Burst < 0 {
		bad("Burst", s.Burst, "≥ 0")
	}
	if !validRate(s.ClientQPS) {
		bad("ClientQPS", s.ClientQPS, "a finite value ≥ 0")
	}
	if s.ClientBurst < 0 {
		bad("ClientBurst", s.ClientBurst, "≥ 0")
	}
	if s.MaxClients < 0 {
		bad("MaxClients", s.MaxClients, "≥ 0")
	}
	if s.IdleAfter < 0 {
		bad("IdleAfter", s.IdleAfter, "≥ 0")
	}
	if len(errs) > 0 {
		return s, errors.Join(errs...)
	}
	s.Burst = defaultBurst(s.Burst, s.QPS)
	s.ClientBurst = defaultBurst(s.ClientBurst, s.ClientQPS)
	if s.MaxClients == 0 {
		s.MaxClients = defaultMaxClients
	}
	if s.IdleAfter == 0 {
		s.IdleAfter = defaultIdleAfter
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	return s, nil
}

func validRate(qps float64) bool { return qps >= 0 && !math.IsInf(qps, 0) } // NaN fails qps >= 0

func defaultBurst(burst int, qps float64) int {
	if burst > 0 {
		return burst
	}
	return max(1, int(math.Min(math.Ceil(qps), math.MaxInt32)))
}

// rateLimit maps QPS 0 (no limit) onto rate.Inf.
func rateLimit(qps float64) rate.Limit {
	if qps == 0 {
		return rate.Inf
	}
	return rate.Limit(qps)
}

// Limiter is the fast breaker: a global token bucket and optional buckets
// per client key. Client keys are hashed at once (maphash, 64 bits, a seed
// per Limiter) and never stored; idle and least recently used client buckets
// are evicted on the way, no goroutine runs. Create one with NewLimiter. Safe
// for concurrent use; must not be copied.
type Limiter struct {
	now    func() time.Time
	global *rate.Limiter // internally synchronized
	seed   maphash.Seed  // per limiter, so hashes are not predictable across processes
	// clients holds the per-client buckets and their settings; it has its own lock.
	clients clientSet
}

// NewLimiter returns a Limiter for s, or an error naming each invalid field.
func NewLimiter(s LimiterSettings) (*Limiter, error) {
	s, err := s.normalized()
	if err != nil {
		return nil, err
	}
	l := &Limiter{
		now:    s.Now,
		global: rate.NewLimiter(rateLimit(s.QPS), s.Burst),
		seed:   maphash.MakeSeed(),
	}
	l.clients.init(s)
	return l, nil
}

// Allow reports whether one request from clientKey may pass now. clientKey
// is the raw value that identifies the client (an Authorization header, for
// example); it is hashed at once and never stored. An empty key, or per-client
// buckets turned off, uses only the global bucket. It returns nil or a
// *LimitError; a refusal consumes no token from any bucket. ctx is not
// used: the decision is local and never waits (the shared limiter in
// cluster, which calls Redis, ends with it).
func (l *Limiter) Allow(_ context.Context, clientKey string) error {
	return l.AllowAt(l.now(), clientKey)
}

// AllowAt is Allow at an explicit instant, for callers on a virtual clock.
func (l *Limiter) AllowAt(now time.Time, clientKey string) error {
	var client *rate.Limiter
	if clientKey != "" {
		client = l.clients.get(now, maphash.String(l.seed, clientKey))
	}
	if client != nil {
		rc := client.ReserveN(now, 1)
		if wait, ok := delay(rc, now); !ok {
			rc.CancelAt(now)
			return &LimitError{Scope: scopeClient, Wait: wait}
		}
		rg := l.global.ReserveN(now, 1)
		if wait, ok := delay(rg, now); !ok {
			rg.CancelAt(now)
			rc.CancelAt(now) // give the client its token back: it was not served
			return &LimitError{Scope: scopeGlobal, Wait: wait}
		}
		return nil
	}
	rg := l.global.ReserveN(now, 1)
	if wait, ok := delay(rg, now); !ok {
		rg.CancelAt(now)
		return &LimitError{Scope: scopeGlobal, Wait: wait}
	}
	return nil
}

// delay reports whether r may act at now, and otherwise how long it must wait.
func delay(r *rate.Reservation, now time.Time) (time.Duration, bool) {
	if !r.OK() { // n > burst: cannot happen with burst ≥ 1, but never admit it
		return time.Second, false
	}
	d := r.DelayFrom(now)
	return d, d == 0
}

// Update applies a reloaded policy. Bucket contents carry over: a changed
// rate or burst takes effect from now without refilling or emptying any
// bucket. Turning per-client buckets off forgets them; a smaller MaxClients
// evicts the least recently used. s.Now is ignored: the clock chosen by
// NewLimiter stays. On error nothing changes.
func (l *Limiter) Update(s LimiterSettings) error {
	s, err := s.normalized()
	if err != nil {
		return err
	}
	now := l.now()
	l.global.SetLimitAt(now, rateLimit(s.QPS))
	l.global.SetBurstAt(now, s.Burst)
	l.clients.update(now, s)
	return nil
}

// Clients returns how many client buckets are held now, after evicting the
// idle ones, for snapshots.
func (l *Limiter) Clients() int { return l.clients.len(l.now()) }
