package admin

import "github.com/gatekeeper-dev/gatekeeper/internal/queue"

// Tenants is the queue's fair share between tenants in State (fairness in
// the policy): how many it remembers, and the backlogged ones first.
type Tenants struct {
	// Count is how many tenants the queue remembers (fairness.max_tenants
	// bounds the idle ones).
	Count int `json:"count"`
	// List holds at most 64 of them: those with waiters first, most
	// waiting first, then by counter.
	List []Tenant `json:"list"`
}

// Tenant is one tenant's share in State. A tenant fairness.tenants does
// not name is shown as "sha256:" and a prefix of its value's hash.
type Tenant struct {
	Tenant   string `json:"tenant"`
	Priority int    `json:"priority"`
	// Weight is its share; Counter its virtual token counter (weighted
	// tokens divided by weight): the least backlogged counter goes next.
	Weight  float64 `json:"weight"`
	Counter float64 `json:"counter"`
	Waiting int     `json:"waiting"`
	// InFlight counts its requests holding a slot; Service is the weighted
	// tokens it has been charged in all, after the true-ups.
	InFlight int   `json:"inflight"`
	Service  int64 `json:"service"`
}

// tenantsOf is the Tenants entry of a queue snapshot.
func tenantsOf(qs queue.Stats) *Tenants {
	t := &Tenants{Count: qs.TenantCount, List: make([]Tenant, 0, len(qs.Tenants))}
	for _, ts := range qs.Tenants {
		t.List = append(t.List, Tenant{Tenant: ts.Tenant, Priority: ts.Priority, Weight: ts.Weight, Counter: ts.Counter,
			Waiting: ts.Waiting, InFlight: ts.InFlight, Service: ts.Service})
	}
	return t
}
