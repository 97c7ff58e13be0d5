package breaker

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// TenantShare guarantees or caps one tenant's part of the global bucket
// (LimiterSettings.Shares), as fractions of its rate (QPS) and size (Burst).
// It reads as the queue's share of each window (queue.Share), so that one
// fairness policy bounds a tenant both before and in the queue.
type TenantShare struct {
	// Min is the part kept for the tenant: a bucket of its own, Min × QPS
	// and ⌈Min × Burst⌉ (at least 1) tokens, cut out of the global bucket,
	// which no other tenant can drain. The tenant takes from it first, then
	// from the rest of the global bucket. 0 (the default) keeps nothing;
	// valid range [0, 1], and the Mins of all tenants sum to at most 1.
	Min float64
	// Max caps the tenant at Max × QPS, burst ⌈Max × Burst⌉ (at least 1):
	// a bucket of its own that it must pass as well as the global one. 0
	// means 1 (no cap); valid range [0, 1] and at least Min.
	Max float64
}

// tenantSpec is the buckets the tenant sharing keeps, from normalized
// settings: the named tenants' caps and reservations, the unnamed tenants'
// cap, and the rate and size left to the common part of the global bucket.
type tenantSpec struct {
	on           bool
	named        map[string]TenantShare
	common       rate.Limit // the global rate less the reservations
	commonBurst  int
	reservedWait time.Duration // the common part's refusal when it gets no rate at all
	unnamed      bucketSpec    // each unnamed tenant's cap bucket
	qps          float64
	burst        int
}

// sharesOn reports whether s shares its global bucket between tenants.
func (s *LimiterSettings) sharesOn() bool {
	return s.QPS > 0 && (len(s.Shares) > 0 || s.DefaultMaxShare > 0 && s.DefaultMaxShare < 1)
}

// shareErrors checks Shares and DefaultMaxShare, one error per problem.
func (s *LimiterSettings) shareErrors() []error {
	var errs []error
	bad := func(v float64) bool { return !(v >= 0 && v <= 1) }
	if bad(s.DefaultMaxShare) {
		errs = append(errs, fmt.Errorf("breaker: LimiterSettings.DefaultMaxShare = %v, want a value in [0, 1]", s.DefaultMaxShare))
	}
	if s.MaxTenants < 0 {
		errs = append(errs, fmt.Errorf("breaker: LimiterSettings.MaxTenants = %d, want ≥ 0", s.MaxTenants))
	}
	names := make([]string, 0, len(s.Shares))
	for name := range s.Shares {
		names = append(names, name)
	}
	sort.Strings(names) // errors in a stable order
	sum := 0.0
	for _, name := range names {
		sh := s.Shares[name]
		switch {
		case bad(sh.Min), bad(sh.Max):
			errs = append(errs, fmt.Errorf("breaker: LimiterSettings.Shares[%q] = %+v, want Min and Max in [0, 1]", name, sh))
		case sh.Max > 0 && sh.Min > sh.Max:
			errs = append(errs, fmt.Errorf("breaker: LimiterSettings.Shares[%q].Min = %v, want at most its Max (%v)", name, sh.Min, sh.Max))
		default:
			sum += sh.Min
		}
	}
	if sum > 1+1e-9 {
		errs = append(errs, errors.New("breaker: LimiterSettings.Shares: the Mins sum to more than 1"))
	}
	return errs
}

// partBurst is a share's part of a bucket of burst tokens: at least one.
func partBurst(share float64, burst int) int {
	return max(1, int(math.Min(math.Ceil(share*float64(burst)), math.MaxInt32)))
}

// tenantSpecOf derives the tenant buckets of normalized settings.
func tenantSpecOf(s LimiterSettings) tenantSpec {
	sp := tenantSpec{on: s.sharesOn(), named: s.Shares, common: rateLimit(s.QPS), commonBurst: s.Burst, qps: s.QPS, burst: s.Burst}
	if !sp.on {
		return sp
	}
	minSum, reserved := 0.0, 0
	for _, sh := range s.Shares {
		if sh.Min > 0 {
			minSum += sh.Min
			reserved += partBurst(sh.Min, s.Burst)
		}
	}
	sp.commonBurst = max(1, s.Burst-reserved)
	if left := 1 - minSum; left > 1e-9 {
		sp.common = rate.Limit(s.QPS * left)
	} else { // the reservations take the whole rate: nothing is left to the others
		sp.common, sp.commonBurst = 0, 0
		sp.reservedWait = time.Duration(float64(s.Burst) / s.QPS * float64(time.Second))
	}
	if d := s.DefaultMaxShare; d > 0 && d < 1 {
		sp.unnamed = bucketSpec{on: true, limit: rate.Limit(d * s.QPS), burst: partBurst(d, s.Burst), max: s.MaxTenants, idleAfter: s.IdleAfter}
	}
	return sp
}

// tenantBuckets are one named tenant's buckets; nil when it has none.
type tenantBuckets struct {
	cap, reserve *rate.Limiter
}

// tenantSet holds the buckets by which the global bucket is shared between
// tenants: the named tenants' (fixed by the settings) and the unnamed ones'
// caps (bounded, least recently used first out). Safe for concurrent use.
type tenantSet struct {
	// mu guards spec and named; the buckets themselves are synchronized.
	mu      sync.Mutex
	spec    tenantSpec
	named   map[string]*tenantBuckets
	unnamed clientSet
}

func (t *tenantSet) init(now time.Time, sp tenantSpec) {
	t.unnamed.init(sp.unnamed)
	t.apply(now, sp)
}

// apply installs sp: a named tenant that keeps a bucket keeps its tokens
// (the bucket takes the new rate and size from now); a new one starts full;
// the unnamed tenants' caps carry over the same way.
func (t *tenantSet) apply(now time.Time, sp tenantSpec) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.named
	t.spec, t.named = sp, nil
	if sp.on {
		t.named = make(map[string]*tenantBuckets, len(sp.named))
		for name, sh := range sp.named {
			var b tenantBuckets
			if o := old[name]; o != nil {
				b = *o
			}
			b.cap = resize(now, b.cap, sh.Max > 0 && sh.Max < 1, sh.Max, sp)
			b.reserve = resize(now, b.reserve, sh.Min > 0, sh.Min, sp)
			t.named[name] = &b
		}
	}
	t.unnamed.update(now, sp.unnamed)
}

// resize returns b resized to share of sp's global bucket (a new, full one
// when b is nil), or nil when want is false.
func resize(now time.Time, b *rate.Limiter, want bool, share float64, sp tenantSpec) *rate.Limiter {
	if !want {
		return nil
	}
	limit, burst := rate.Limit(share*sp.qps), partBurst(share, sp.burst)
	if b == nil {
		return rate.NewLimiter(limit, burst)
	}
	b.SetLimitAt(now, limit)
	b.SetBurstAt(now, burst)
	return b
}

// tenantPick is what one request of a tenant must pass: its cap and its
// reservation (each nil when it has none), then the common part of the
// global bucket, unless that part has no rate (closed is its refusal's wait).
type tenantPick struct {
	on           bool
	cap, reserve *rate.Limiter
	closed       time.Duration
}

// pick returns tenant's buckets; key is the tenant's hash, for the unnamed
// tenants' caps.
func (t *tenantSet) pick(now time.Time, tenant string, key uint64) tenantPick {
	t.mu.Lock()
	p := tenantPick{on: t.spec.on, closed: t.spec.reservedWait}
	b, named := t.named[tenant]
	t.mu.Unlock()
	switch {
	case !p.on:
	case named:
		p.cap, p.reserve = b.cap, b.reserve
	default:
		p.cap = t.unnamed.get(now, key)
	}
	return p
}

// len is how many unnamed tenants' caps are kept now.
func (t *tenantSet) len(now time.Time) int { return t.unnamed.len(now) }
