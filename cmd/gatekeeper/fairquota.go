package main

import (
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/quota"
)

// fairnessFrom maps the policy's fairness section onto the core's; nil
// without one.
func fairnessFrom(f *config.Fairness) *decide.Fairness {
	if f == nil {
		return nil
	}
	out := &decide.Fairness{TenantHeader: f.TenantHeader, InputWeight: f.InputWeight, OutputWeight: f.OutputWeight}
	for _, t := range f.Tenants {
		if out.Tenants == nil {
			out.Tenants = map[string]decide.Tenant{}
		}
		out.Tenants[t.Key] = decide.Tenant{Name: t.Name, Weight: t.Weight}
	}
	return out
}

// quotaLimits maps the policy's quotas onto the quota package's limits; the
// zero Limits (nothing limited) without a quotas section, so that a reload
// that removes it lifts every quota.
func quotaLimits(q *config.Quotas) quota.Limits {
	if q == nil {
		return quota.Limits{}
	}
	var l quota.Limits
	if q.PerClient != nil {
		l.PerClient = limitOf(*q.PerClient)
	}
	for _, c := range q.Clients {
		if l.Clients == nil {
			l.Clients = map[string]quota.Limit{}
		}
		l.Clients[c.Key] = limitOf(c.Limit())
	}
	l.Classes, l.Models = limitsOf(q.Classes), limitsOf(q.Models)
	return l
}

// limitOf is one policy quota as the quota package's limit.
func limitOf(c config.Quota) quota.Limit {
	return quota.Limit{PerMinute: c.TokensPerMinute, PerDay: c.TokensPerDay}
}

// limitsOf maps a policy's quotas by name; nil for none.
func limitsOf(m map[string]config.Quota) map[string]quota.Limit {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]quota.Limit, len(m))
	for name, c := range m {
		out[name] = limitOf(c)
	}
	return out
}

// setQuotas installs the policy's quotas: over every replica in cluster
// mode (the local quotas then hold this replica's share), else on this
// replica alone.
func (a *app) setQuotas(l quota.Limits) error {
	if a.shQuotas != nil {
		return a.shQuotas.SetLimits(l)
	}
	return a.quotas.SetLimits(l)
}
