package policy

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/cluster"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods/healthcheck"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/proxy"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/quota"
	"github.com/gatekeeper-dev/gatekeeper/internal/route"
	"github.com/gatekeeper-dev/gatekeeper/internal/scale"
	"github.com/gatekeeper-dev/gatekeeper/internal/telemetry"
)

// Settings is every package's Settings derived from one policy file. It is
// the one place where config keys meet package knobs.
type Settings struct {
	Limiter   breaker.LimiterSettings
	classes   map[string]breaker.LimiterSettings // classes with a token bucket of their own
	models    map[string]breaker.LimiterSettings // models with a token bucket of their own
	Errors    breaker.ErrorSettings
	Queue     queue.Settings
	Policy    decide.Policy
	Transport proxy.TransportSettings
	Health    healthcheck.Settings
	quotas    quota.Limits // the zero value: none
	Upstreams []Upstream
	// Routing is the pod scorer's (route.Router): its weights change on a
	// reload, its capacity only at start.
	Routing route.Settings
}

// Upstream is one pod as the wiring needs it.
type Upstream struct {
	Name           string
	URL            *url.URL
	maxInflight    int
	minInflight    int
	Models         []string
	DiscoverModels bool
}

// from maps a validated policy onto the packages' Settings.
func from(c *config.Config) (Settings, error) {
	s := Settings{
		Limiter: breaker.LimiterSettings{QPS: c.FastBreaker.QPS, Burst: c.FastBreaker.Burst},
		Errors: breaker.ErrorSettings{
			Failures:         c.UpstreamBreaker.Failures,
			OpenFor:          c.UpstreamBreaker.OpenFor,
			HalfOpenRequests: c.UpstreamBreaker.HalfOpenRequests,
		},
		Queue: queue.Settings{
			MaxLength:       c.Queue.MaxLength,
			MaxTokens:       c.Queue.MaxTokens,
			StarvationAfter: c.Queue.StarvationAfter,
		},
		Policy: decidePolicy(c),
		Transport: proxy.TransportSettings{
			DialTimeout:           c.Transport.DialTimeout,
			TLSHandshakeTimeout:   c.Transport.TLSHandshakeTimeout,
			ResponseHeaderTimeout: c.Transport.ResponseHeaderTimeout,
			IdleConnTimeout:       c.Transport.IdleConnTimeout,
			MaxIdleConnsPerHost:   c.Transport.MaxIdleConnsPerHost,
		},
		Health: healthcheck.Settings{
			Path:           c.HealthCheck.Path,
			Interval:       c.HealthCheck.Interval,
			Timeout:        c.HealthCheck.Timeout,
			UnhealthyAfter: c.HealthCheck.UnhealthyAfter,
			HealthyAfter:   c.HealthCheck.HealthyAfter,
		},
		quotas:  quotaLimits(c.Quotas),
		Routing: routingFrom(c.Routing),
	}
	if pc := c.FastBreaker.PerClient; pc != nil {
		s.Limiter.ClientQPS, s.Limiter.ClientBurst = pc.QPS, pc.Burst
		s.Limiter.MaxClients, s.Limiter.IdleAfter = pc.MaxClients, pc.IdleAfter
	}
	s.Policy.Classes, s.classes = classesFrom(c.Classes)
	if c.Fairness != nil {
		s.Queue.MaxTenants = c.Fairness.MaxTenants
		s.Queue.Shares, s.Queue.DefaultMaxShare = sharesFrom(c.Fairness)
		// With a cluster the global bucket is Redis's, asked without the
		// tenant (cluster.Gate): splitting the local fallback's would only
		// shrink what it admits.
		if c.Fairness.ShareFastBreaker && c.Cluster == nil {
			s.Limiter.Shares, s.Limiter.DefaultMaxShare = limiterShares(s.Queue.Shares), s.Queue.DefaultMaxShare
			s.Limiter.MaxTenants = c.Fairness.MaxTenants
		}
	}
	for model, l := range c.ModelLimits {
		if s.models == nil {
			s.models = map[string]breaker.LimiterSettings{}
		}
		s.models[model] = breaker.LimiterSettings{QPS: l.QPS, Burst: l.Burst}
	}
	for i, u := range c.Upstreams {
		parsed, err := url.Parse(u.URL)
		if err != nil {
			return Settings{}, fmt.Errorf("gatekeeper: upstreams[%d].url: %w", i, err)
		}
		s.Upstreams = append(s.Upstreams, Upstream{Name: u.Name, URL: parsed,
			maxInflight: u.MaxInflight, minInflight: u.MinInflight, Models: u.Models, DiscoverModels: u.DiscoverModels})
		// A pod's full window reuses its connections after a burst (issue 38).
		s.Transport.MaxIdleConnsPerHost = max(s.Transport.MaxIdleConnsPerHost, u.MaxInflight)
	}
	return s, nil
}

// decidePolicy maps the keys the decision core reads per request.
func decidePolicy(c *config.Config) decide.Policy {
	p := decide.Policy{
		Observe:             c.Mode == config.ModeObserve,
		MaxBodyBytes:        c.Server.MaxBodyBytes,
		RequestIDHeader:     c.Server.RequestIDHeader,
		CharsPerToken:       c.Estimate.CharsPerToken,
		DefaultMaxTokens:    int64(c.Estimate.DefaultMaxTokens),
		BytesPerLogit:       int64(c.Estimate.BytesPerLogit),
		PromptLogprobsChunk: int64(c.Estimate.PromptLogprobsChunk),
		MaxWait:             c.Queue.MaxWait,
		TTFTDeadline:        c.Queue.TTFTDeadline,
		DeadlineHeader:      c.Queue.DeadlineHeader,
		RetryAfter:          c.Shed.RetryAfter,
		SendTimeout:         c.Server.SendTimeout,
		Fair:                fairnessFrom(c.Fairness),
		Quotas:              c.Quotas != nil,
		QuotaShadow:         c.Quotas != nil && c.Quotas.Mode == config.QuotaShadow,
		Prefix:              scoring(c) && c.Routing.Scorers.Prefix > 0,
	}
	if pc := c.FastBreaker.PerClient; pc != nil {
		p.ClientKeyHeader = pc.Header
	}
	for _, u := range c.Upstreams {
		if u.ForwardPriority {
			if p.ForwardPriority == nil {
				p.ForwardPriority = map[string]bool{}
			}
			p.ForwardPriority[u.Name] = true
		}
	}
	return p
}

// classesFrom maps the policy's traffic classes onto the core's, and the
// classes with a QPS of their own onto limiter settings.
func classesFrom(c *config.Classes) (*decide.Classes, map[string]breaker.LimiterSettings) {
	if c == nil {
		return nil, nil
	}
	out := &decide.Classes{Header: c.Header, Default: c.Default}
	limits := map[string]breaker.LimiterSettings{}
	for _, cl := range c.List {
		out.List = append(out.List, decide.Class{Name: cl.Name, Priority: cl.Priority, Routes: cl.Routes, ClientKeys: cl.ClientKeys,
			TTFTDeadline: cl.TTFTDeadline})
		if cl.QPS > 0 {
			limits[cl.Name] = breaker.LimiterSettings{QPS: cl.QPS, Burst: cl.Burst}
		}
	}
	return out, limits
}

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

// limiterShares are the queue's shares as the fast breaker's: the same
// fractions of its global bucket (fairness.share_fast_breaker).
func limiterShares(q map[string]queue.Share) map[string]breaker.TenantShare {
	if q == nil {
		return nil
	}
	out := make(map[string]breaker.TenantShare, len(q))
	for name, sh := range q {
		out[name] = breaker.TenantShare{Min: sh.Min, Max: sh.Max}
	}
	return out
}

// sharesFrom maps the tenants' min and max shares onto the queue's, by the
// name the decision core gives a named tenant (decide.Fairness); every
// other tenant (unnamed or anonymous) gets the default cap. Nil when no
// tenant has a share, and 0 (no cap) for a default cap of 1.
func sharesFrom(f *config.Fairness) (map[string]queue.Share, float64) {
	var shares map[string]queue.Share
	for _, t := range f.Tenants {
		if t.MinShare > 0 || t.MaxShare > 0 && t.MaxShare < 1 {
			if shares == nil {
				shares = map[string]queue.Share{}
			}
			sh := queue.Share{Min: t.MinShare}
			if t.MaxShare < 1 {
				sh.Max = t.MaxShare
			}
			shares[t.Name] = sh
		}
	}
	var def float64
	if f.DefaultMaxShare < 1 {
		def = f.DefaultMaxShare
	}
	if def > 0 {
		// A named tenant without a share of its own is not capped by the
		// default: list it with no cap.
		for _, t := range f.Tenants {
			if _, ok := shares[t.Name]; !ok {
				if shares == nil {
					shares = map[string]queue.Share{}
				}
				shares[t.Name] = queue.Share{}
			}
		}
	}
	return shares, def
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

// pressureSettings maps the policy's sources onto pressure.Settings, read
// through client (nil: the pressure package's own).
func pressureSettings(c *config.Config, client *http.Client) pressure.Settings {
	s := pressure.Settings{
		Interval:   c.Pressure.Interval,
		StaleAfter: c.Pressure.StaleAfter,
		HTTPClient: client,
	}
	for _, src := range c.Pressure.Sources {
		s.Sources = append(s.Sources, sourceSettings(src))
	}
	for _, u := range c.Upstreams {
		us := pressure.UpstreamSettings{Name: u.Name, GPUs: u.GPUs}
		for _, src := range u.Sources {
			us.Sources = append(us.Sources, sourceSettings(src))
		}
		s.Upstreams = append(s.Upstreams, us)
	}
	return s
}

func sourceSettings(s config.Source) pressure.SourceSettings {
	return pressure.SourceSettings{Kind: pressure.Kind(s.Kind), URL: s.URL, Name: s.Name, Timeout: s.Timeout}
}

// ClusterSettings maps the policy's cluster section onto cluster.Settings.
func ClusterSettings(c *config.Cluster) cluster.Settings {
	return cluster.Settings{URL: c.Redis.URL, PasswordFile: c.Redis.PasswordFile, CAFile: c.Redis.CAFile,
		KeyPrefix: c.KeyPrefix, Timeout: c.Timeout, LeaseTTL: c.LeaseTTL, HeartbeatInterval: c.Heartbeat,
		ReplicaID: c.ReplicaID, Replicas: c.Replicas}
}

// ScaleSettings maps the policy's scaling section onto scale.Settings;
// each zero key keeps scale's default. now is the scaler's clock (nil:
// time.Now).
func ScaleSettings(c *config.Scaling, now func() time.Time) scale.Settings {
	return scale.Settings{Interval: c.Interval, Horizon: c.PodStartTime, MinReplicas: c.MinReplicas, MaxReplicas: c.MaxReplicas,
		Stabilization: c.Stabilization, TargetUtilization: c.TargetUtilization, Alpha: c.Alpha, Beta: c.Beta, PodRate: c.PodRate, Now: now}
}

// TracingSettings maps the policy's tracing section onto telemetry's
// Settings; the environment (getenv) fills what it leaves unset.
func TracingSettings(t *config.Tracing, version string, getenv func(string) string) telemetry.Settings {
	return telemetry.Settings{Endpoint: t.Endpoint, Protocol: telemetry.Protocol(t.Protocol), SampleRatio: t.SampleRatio,
		Headers: t.Headers, Insecure: t.Insecure, Version: version, Getenv: getenv}
}

// bases maps each pod to its largest window: the unit of its leases.
func bases(ups []Upstream) map[string]int {
	m := make(map[string]int, len(ups))
	for _, u := range ups {
		m[u.Name] = u.maxInflight
	}
	return m
}
