package replay

import (
	"fmt"
	"hash/fnv"
)

// TenantShare is one tenant's traffic in a TenantTrace: the trace's request
// mix at Rate × its arrival rates.
type TenantShare struct {
	Name string
	// Rate multiplies the trace's BaseQPS and BurstQPS for this tenant.
	Rate float64
}

// TenantTrace merges one synthetic trace per tenant, each labelled with its
// tenant (Arrival.Tenant): the same request mix, each tenant at its own
// rate, its arrivals drawn from a seed of its own (the trace's seed and the
// tenant's name), so that a tenant's arrivals are the same whichever other
// tenants share the trace: a tenant replayed alone sees exactly what it sent
// beside the others. Create one with NewTenantTrace. Not safe for
// concurrent use.
type TenantTrace struct {
	names  []string
	traces []*Trace
	next   []Arrival // each tenant's next arrival
	more   []bool
}

// NewTenantTrace returns the merged trace of s's traffic split into shares.
// Errors: no share, a duplicate or empty name, a rate not above 0, or
// invalid trace settings.
func NewTenantTrace(s TraceSettings, shares []TenantShare) (*TenantTrace, error) {
	if len(shares) == 0 {
		return nil, fmt.Errorf("replay: NewTenantTrace: no tenant")
	}
	s = s.withDefaults()
	tt := &TenantTrace{}
	for i, sh := range shares {
		for _, n := range tt.names {
			if n == sh.Name {
				return nil, fmt.Errorf("replay: NewTenantTrace: tenant %q twice", sh.Name)
			}
		}
		if sh.Name == "" || !(sh.Rate > 0) {
			return nil, fmt.Errorf("replay: NewTenantTrace: shares[%d] = %+v, want a name and a rate > 0", i, sh)
		}
		ts := s
		ts.BaseQPS, ts.BurstQPS = s.BaseQPS*sh.Rate, s.BurstQPS*sh.Rate
		ts.Seed = tenantSeed(s.Seed, sh.Name)
		tr, err := NewTrace(ts)
		if err != nil {
			return nil, err
		}
		a, ok := tr.Next()
		a.Tenant = sh.Name
		tt.names, tt.traces = append(tt.names, sh.Name), append(tt.traces, tr)
		tt.next, tt.more = append(tt.next, a), append(tt.more, ok)
	}
	return tt, nil
}

// tenantSeed is a tenant's own seed: the trace's, mixed with its name.
func tenantSeed(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return seed ^ h.Sum64()
}

// Next returns the earliest next arrival of any tenant (ties: the first
// share), or false once every tenant's trace has ended.
func (tt *TenantTrace) Next() (Arrival, bool) {
	best := -1
	for i := range tt.traces {
		if tt.more[i] && (best < 0 || tt.next[i].At < tt.next[best].At) {
			best = i
		}
	}
	if best < 0 {
		return Arrival{}, false
	}
	a := tt.next[best]
	tt.next[best], tt.more[best] = tt.traces[best].Next()
	tt.next[best].Tenant = tt.names[best]
	return a, true
}

// Err returns nil: a synthetic trace cannot fail.
func (tt *TenantTrace) Err() error { return nil }

// Classes returns the names of the request mix's classes.
func (tt *TenantTrace) Classes() []string { return tt.traces[0].Classes() }

// Tenants returns the tenants' names, in the order of the shares.
func (tt *TenantTrace) Tenants() []string { return tt.names }
