package config

import (
	"fmt"
	"strings"
)

// Fairness shares the admission queue between tenants within each traffic
// class with a Virtual Token Counter (docs/design.md): the backlogged
// tenant that has received the least weighted service goes next, and a
// tenant that comes back from idle is lifted to the least backlogged one's
// counter, so it cannot bank credit. Inside a tenant the queue's own order
// (queue.order, aging, deadlines) holds. Optional: without it the waiters
// of a class leave in the queue's order alone.
type Fairness struct {
	// TenantHeader names the header whose value is a request's tenant; ""
	// means the per-client key (fast_breaker.per_client.header's value). A
	// request without it is the tenant of everyone without it.
	TenantHeader string `yaml:"tenant_header"`
	// InputWeight weighs a prompt token in the service counted to its
	// tenant.
	InputWeight float64 `yaml:"input_weight"`
	// OutputWeight weighs a generated token: decoding holds the GPU longer
	// per token than prefill.
	OutputWeight float64 `yaml:"output_weight"`
	// MaxTenants bounds the idle tenants remembered; the ones that have
	// received the least service are forgotten first (the lift restores
	// them). Tenants with waiters or requests in flight are always kept.
	// With share_fast_breaker it also bounds the unnamed tenants' caps of
	// the global bucket kept, the least recently used evicted first.
	MaxTenants int `yaml:"max_tenants"`
	// Tenants names tenants and gives them a weight; every other tenant has
	// weight 1 and is counted as "other" in metrics.
	Tenants []Tenant `yaml:"tenants"`
	// DefaultMaxShare caps the part of each pod's window (its sequences in
	// flight) that each tenant fairness.tenants does not name may hold, as
	// a tenant's max_share does (with share_fast_breaker, its rate too);
	// 1 is no cap. Range (0, 1].
	DefaultMaxShare float64 `yaml:"default_max_share"`
	// ShareFastBreaker applies the shares to fast_breaker.qps too, so that
	// a heavy tenant's requests (and its clients' retries) cannot empty the
	// global bucket for the others: each tenant with a max_share (or under
	// default_max_share) may take at most that part of the global rate and
	// burst, and a tenant's min_share of them is a bucket of its own that no
	// other tenant can drain (docs/tenants.md). Only while some tenant has
	// a share and fast_breaker.qps is above 0; false leaves the global
	// bucket one for every tenant. Not shared across replicas with a
	// cluster section (Redis holds the global bucket).
	ShareFastBreaker bool `yaml:"share_fast_breaker"`
}

// Tenant is one named tenant.
type Tenant struct {
	// Name is what metrics and /admin/state call it.
	Name string `yaml:"name"`
	// Key is "sha256:" and the hex SHA-256 of the tenant header's value, so
	// that no API key is written in the policy.
	Key string `yaml:"key"`
	// Weight is its share: while two tenants wait, one of weight 2 is
	// served twice the weighted tokens of one of weight 1.
	Weight float64 `yaml:"weight"`
	// MinShare is the part of each pod's window (its sequences in flight, as
	// the window counts them, cut by pressure with it) kept for this
	// tenant: floor(min_share × window) slots that no other tenant is
	// granted while it holds fewer, even while it sends nothing, so that its
	// next request starts at once instead of waiting for another tenant's
	// slot to end. 0 keeps nothing. Range [0, 1], at most max_share; the
	// min_shares of all tenants sum to at most 1. With share_fast_breaker,
	// also that part of fast_breaker.qps and burst, as a bucket of its own.
	MinShare float64 `yaml:"min_share"`
	// MaxShare caps the tenant's part of each pod's window at
	// ceil(max_share × window) slots: at its cap it waits even when the
	// window has room (a request larger than the cap alone still runs
	// while the tenant holds nothing there). 1 is no cap. Range (0, 1].
	// With share_fast_breaker, also a cap of max_share × fast_breaker.qps
	// on its requests a second (429 at it).
	MaxShare float64 `yaml:"max_share"`
}

func (f *Fairness) setDefaults() {
	f.InputWeight, f.OutputWeight, f.MaxTenants, f.DefaultMaxShare = 1, 2, 10000, 1
	f.ShareFastBreaker = true
}

func (t *Tenant) setDefaults() { t.Weight, t.MaxShare = 1, 1 }

func (k *checker) fairness(f *Fairness, perClient *PerClient) {
	if f == nil {
		return
	}
	if f.TenantHeader != "" && !isToken(f.TenantHeader) {
		k.add("fairness.tenant_header", "must be a valid header name, got %q", f.TenantHeader)
	}
	if f.TenantHeader == "" && perClient == nil {
		k.add("fairness.tenant_header", "is required without fast_breaker.per_client.header (whose value is the tenant otherwise)")
	}
	k.weight("fairness.input_weight", f.InputWeight)
	k.weight("fairness.output_weight", f.OutputWeight)
	k.atLeast("fairness.max_tenants", int64(f.MaxTenants), 1)
	k.share("fairness.default_max_share", f.DefaultMaxShare, false)
	names, keys := map[string]bool{}, map[string]bool{}
	minSum := 0.0
	for i, t := range f.Tenants {
		p := fmt.Sprintf("fairness.tenants[%d]", i)
		switch {
		case t.Name == "":
			k.add(p+".name", "must not be empty")
		case t.Name == otherTenant || t.Name == anonymousTenant:
			k.add(p+".name", "%q is what metrics call the unnamed tenants; choose another name", t.Name)
		case strings.HasPrefix(t.Name, "sha256:"):
			k.add(p+".name", "must not start with \"sha256:\" (how unnamed tenants are shown), got %q", t.Name)
		case names[t.Name]:
			k.add(p+".name", "%q is listed twice", t.Name)
		}
		names[t.Name] = true
		switch {
		case !validKeyHash(t.Key):
			k.add(p+".key", "must be \"sha256:\" and 64 hex digits, got %q", t.Key)
		case keys[t.Key]:
			k.add(p+".key", "is listed twice")
		}
		keys[t.Key] = true
		k.weight(p+".weight", t.Weight)
		okMin, okMax := k.share(p+".min_share", t.MinShare, true), k.share(p+".max_share", t.MaxShare, false)
		if okMin && okMax && t.MinShare > t.MaxShare {
			k.add(p+".min_share", "must not exceed max_share (%v), got %v", t.MaxShare, t.MinShare)
		}
		if okMin {
			minSum += t.MinShare
		}
	}
	if minSum > 1+1e-9 {
		k.add("fairness.tenants", "min_shares sum to %.3g; they must sum to at most 1 (each is a part of the same window)", minSum)
	}
}

// share checks a part of a window: in (0, 1], or [0, 1] when zero is
// allowed. It reports whether v is valid.
func (k *checker) share(path string, v float64, zero bool) bool {
	switch {
	case zero && !(v >= 0 && v <= 1):
		k.add(path, "must be a number ≥ 0 and ≤ 1, got %v", v)
	case !zero && !(v > 0 && v <= 1):
		k.add(path, "must be a number > 0 and ≤ 1, got %v", v)
	default:
		return true
	}
	return false
}

// OtherTenant is the metrics label of every tenant fairness.tenants does
// not name; AnonymousTenant that of requests without a tenant value.
const (
	otherTenant     = "other"
	anonymousTenant = "anonymous"
)

// weight checks a positive, finite share.
func (k *checker) weight(path string, v float64) {
	if !(v > 0) || v > 1e6 {
		k.add(path, "must be a number > 0 and ≤ 1e6, got %v", v)
	}
}
