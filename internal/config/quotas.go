package config

import "fmt"

// Quotas are token quotas: the tokens (prompt and output, as the pod
// reports them) a client key, a traffic class or a model may use per
// minute and per day, over sliding windows. A request is charged its
// estimate (prompt + max_tokens, for every sequence) when it is admitted
// and trued up from the response's usage when it ends, so concurrent
// requests overspend by at most the estimates in flight. Over quota: 429
// quota_exceeded with Retry-After = when the window has room again. With
// cluster set the quotas hold over every replica. Optional.
type Quotas struct {
	// Mode is enforce (refuse over quota) or shadow (charge, count and
	// report what would be refused, refuse nothing): roll a quota out in
	// shadow first and watch gatekeeper_decisions_total.
	Mode QuotaMode `yaml:"mode"`
	// PerClient, if set, is every client key's own quota (the value of
	// fast_breaker.per_client.header).
	PerClient *Quota `yaml:"per_client"`
	// Clients override PerClient for some client keys (both limits 0:
	// exempt).
	Clients []ClientQuota `yaml:"clients"`
	// Classes are quotas per traffic class (keys: classes.list names).
	Classes map[string]Quota `yaml:"classes"`
	// Models are quotas per model (the body's "model").
	Models map[string]Quota `yaml:"models"`
}

// Quota is one key's tokens per window; 0 is no limit in that window.
type Quota struct {
	TokensPerMinute int64 `yaml:"tokens_per_minute"` // over any sliding minute
	TokensPerDay    int64 `yaml:"tokens_per_day"`    // over any sliding 24 hours
}

// ClientQuota is one client key's own quota.
type ClientQuota struct {
	// Key is "sha256:" and the hex SHA-256 of the per-client header's
	// value, so that no API key is written in the policy.
	Key             string `yaml:"key"`
	TokensPerMinute int64  `yaml:"tokens_per_minute"` // over any sliding minute; 0: none
	TokensPerDay    int64  `yaml:"tokens_per_day"`    // over any sliding 24 hours; 0: none
}

// Limit is c's quota without its key.
func (c ClientQuota) Limit() Quota {
	return Quota{TokensPerMinute: c.TokensPerMinute, TokensPerDay: c.TokensPerDay}
}

// QuotaMode says whether quotas refuse.
type QuotaMode string

// Quota modes.
const (
	QuotaEnforce QuotaMode = "enforce"
	QuotaShadow  QuotaMode = "shadow"
)

func (q *Quotas) setDefaults() { q.Mode = QuotaEnforce }

func (k *checker) quotas(q *Quotas, perClient *PerClient, classes *Classes) {
	if q == nil {
		return
	}
	k.oneOf("quotas.mode", string(q.Mode), QuotaEnforce, QuotaShadow)
	if (q.PerClient != nil || len(q.Clients) > 0) && perClient == nil {
		k.add("quotas.per_client", "needs fast_breaker.per_client.header, the header whose value is the client key")
	}
	if q.PerClient != nil {
		k.quota("quotas.per_client", *q.PerClient)
	}
	keys := map[string]bool{}
	for i, c := range q.Clients {
		p := fmt.Sprintf("quotas.clients[%d]", i)
		switch {
		case !validKeyHash(c.Key):
			k.add(p+".key", "must be \"sha256:\" and 64 hex digits, got %q", c.Key)
		case keys[c.Key]:
			k.add(p+".key", "is listed twice")
		}
		keys[c.Key] = true
		k.quota(p, c.Limit())
	}
	for name, l := range q.Classes {
		p := "quotas.classes." + name
		if classes == nil || !classes.has(name) {
			k.add(p, "must name a class of classes.list, got %q", name)
		}
		k.quota(p, l)
	}
	for name, l := range q.Models {
		k.quota("quotas.models."+name, l)
	}
}

// quota checks one quota: no negative figure (both 0: no limit, so a client
// listed with both 0 is exempt from per_client).
func (k *checker) quota(path string, q Quota) {
	if q.TokensPerMinute < 0 {
		k.add(path+".tokens_per_minute", "must not be negative (0: no limit per minute), got %d", q.TokensPerMinute)
	}
	if q.TokensPerDay < 0 {
		k.add(path+".tokens_per_day", "must not be negative (0: no limit per day), got %d", q.TokensPerDay)
	}
}

// has reports whether a class of that name is listed.
func (c *Classes) has(name string) bool {
	for _, cl := range c.List {
		if cl.Name == name {
			return true
		}
	}
	return false
}
