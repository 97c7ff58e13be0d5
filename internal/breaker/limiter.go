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
	// Shares shares the global bucket between tenants, by the tenant name
	// AllowTenant is given (the queue's names, decide.Fairness): each
	// listed tenant's reservation and cap (TenantShare). With QPS 0 there
	// is nothing to share and Shares, DefaultMaxShare and MaxTenants are
	// ignored; without a share nothing is kept per tenant.
	Shares map[string]TenantShare
	// DefaultMaxShare caps each tenant Shares does not list, as a
	// TenantShare.Max does; 0 or 1 is no cap. A tenant listed with a zero
	// TenantShare is not capped.
	DefaultMaxShare float64
	// MaxTenants bounds the unlisted tenants' cap buckets kept; when full,
	// the least recently used one is evicted (that tenant starts again with
	// a full cap). An unused one goes after IdleAfter. 0 means
	// DefaultMaxClients.
	MaxTenants int
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
	errs = append(errs, s.shareErrors()...)
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
	if s.MaxTenants == 0 {
		s.MaxTenants = defaultMaxClients
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
// per client key, and optionally the global bucket shared between tenants
// (LimiterSettings.Shares: AllowTenant). Client keys are hashed at once (maphash, 64 bits, a seed
// per Limiter) and never stored; idle and least recently used client buckets
// are evicted on the way, no goroutine runs. Create one with NewLimiter. Safe
// for concurrent use; must not be copied.
type Limiter struct {
	now func() time.Time
	// global is the global bucket; while tenants share it, its part that
	// no reservation holds. Internally synchronized.
	global *rate.Limiter
	seed   maphash.Seed // per limiter, so hashes are not predictable across processes
	// clients holds the per-client buckets and their settings; it has its own lock.
	clients clientSet
	// tenants holds the tenants' caps and reservations; its own lock.
	tenants tenantSet
}

// NewLimiter returns a Limiter for s, or an error naming each invalid field.
func NewLimiter(s LimiterSettings) (*Limiter, error) {
	s, err := s.normalized()
	if err != nil {
		return nil, err
	}
	sp := tenantSpecOf(s)
	l := &Limiter{
		now:    s.Now,
		global: rate.NewLimiter(sp.common, sp.commonBurst),
		seed:   maphash.MakeSeed(),
	}
	l.clients.init(clientSpec(s))
	l.tenants.init(s.Now(), sp)
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
	return l.allow(now, clientKey, tenantPick{})
}

// AllowTenant is Allow for a request of tenant (its name as the queue knows
// it; "" for requests without a tenant, which are one tenant together).
// While LimiterSettings.Shares or DefaultMaxShare share the global bucket,
// the request must pass its client's bucket, then its tenant's cap, then
// its tenant's reservation or else the common part of the global bucket;
// otherwise it is Allow. A refusal consumes no token from any bucket and
// carries the wait of the bucket that refused: the cap's (Scope "tenant"),
// or, refused by the global bucket, the sooner of its reservation's and the
// common part's.
func (l *Limiter) AllowTenant(_ context.Context, clientKey, tenant string) error {
	return l.AllowTenantAt(l.now(), clientKey, tenant)
}

// AllowTenantAt is AllowTenant at an explicit instant.
func (l *Limiter) AllowTenantAt(now time.Time, clientKey, tenant string) error {
	return l.allow(now, clientKey, l.tenants.pick(now, tenant, maphash.String(l.seed, tenant)))
}

// allow takes one token from each bucket the request must pass, in order,
// or none: each reservation taken is cancelled when a later bucket refuses.
func (l *Limiter) allow(now time.Time, clientKey string, p tenantPick) error {
	var held [2]*rate.Reservation
	undo := func(err *LimitError) error {
		for _, r := range held {
			if r != nil {
				r.CancelAt(now)
			}
		}
		return err
	}
	if clientKey != "" {
		if client := l.clients.get(now, maphash.String(l.seed, clientKey)); client != nil {
			r, wait, ok := take(client, now)
			if !ok {
				return &LimitError{Scope: scopeClient, Wait: wait}
			}
			held[0] = r
		}
	}
	if p.cap != nil {
		r, wait, ok := take(p.cap, now)
		if !ok {
			return undo(&LimitError{Scope: scopeTenant, Wait: wait})
		}
		held[1] = r
	}
	wait := time.Duration(math.MaxInt64)
	if p.reserve != nil {
		w, ok := takeLast(p.reserve, now)
		if ok {
			return nil
		}
		wait = w
	}
	if p.closed > 0 { // the reservations take the whole rate
		return undo(&LimitError{Scope: scopeGlobal, Wait: min(wait, p.closed)})
	}
	if w, ok := takeLast(l.global, now); !ok {
		return undo(&LimitError{Scope: scopeGlobal, Wait: min(wait, w)})
	}
	return nil
}

// takeLast is take for the last bucket a request passes, whose token is
// never given back: without a reservation when b holds a token (AllowN
// allocates none, where ReserveN allocates one per request), else the wait
// take reports (or the token, given back to b in between).
func takeLast(b *rate.Limiter, now time.Time) (time.Duration, bool) {
	if b.AllowN(now, 1) {
		return 0, true
	}
	_, wait, ok := take(b, now)
	return wait, ok
}

// take reserves one token of b at now: the reservation, or the wait until
// b holds a token (b then keeps its tokens).
func take(b *rate.Limiter, now time.Time) (*rate.Reservation, time.Duration, bool) {
	r := b.ReserveN(now, 1)
	if wait, ok := delay(r, now); !ok {
		r.CancelAt(now)
		return nil, wait, false
	}
	return r, 0, true
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
	now, sp := l.now(), tenantSpecOf(s)
	l.global.SetLimitAt(now, sp.common)
	l.global.SetBurstAt(now, sp.commonBurst)
	l.clients.update(now, clientSpec(s))
	l.tenants.apply(now, sp)
	return nil
}

// Tenants returns how many unlisted tenants' cap buckets are held now,
// after evicting the idle ones, for snapshots.
func (l *Limiter) Tenants() int { return l.tenants.len(l.now()) }

// Clients returns how many client buckets are held now, after evicting the
// idle ones, for snapshots.
func (l *Limiter) Clients() int { return l.clients.len(l.now()) }
