package main

import (
	"fmt"
	"net/url"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods/healthcheck"
	"github.com/gatekeeper-dev/gatekeeper/internal/proxy"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/quota"
)

// settings is every package's Settings derived from one policy file. It is
// the one place where config keys meet package knobs.
type settings struct {
	limiter   breaker.LimiterSettings
	classes   map[string]breaker.LimiterSettings // classes with a token bucket of their own
	models    map[string]breaker.LimiterSettings // models with a token bucket of their own
	errors    breaker.ErrorSettings
	queue     queue.Settings
	policy    decide.Policy
	transport proxy.TransportSettings
	health    healthcheck.Settings
	quotas    quota.Limits // the zero value: none
	upstreams []upstreamSpec
}

// upstreamSpec is one pod as the wiring needs it.
type upstreamSpec struct {
	name           string
	url            *url.URL
	maxInflight    int
	minInflight    int
	models         []string
	discoverModels bool
}

// settingsFrom maps a validated policy onto the packages' Settings.
func settingsFrom(c *config.Config) (settings, error) {
	s := settings{
		limiter: breaker.LimiterSettings{QPS: c.FastBreaker.QPS, Burst: c.FastBreaker.Burst},
		errors: breaker.ErrorSettings{
			Failures:         c.UpstreamBreaker.Failures,
			OpenFor:          c.UpstreamBreaker.OpenFor,
			HalfOpenRequests: c.UpstreamBreaker.HalfOpenRequests,
		},
		queue: queue.Settings{
			MaxLength:       c.Queue.MaxLength,
			MaxTokens:       c.Queue.MaxTokens,
			StarvationAfter: c.Queue.StarvationAfter,
		},
		policy: decide.Policy{
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
		},
		transport: proxy.TransportSettings{
			DialTimeout:           c.Transport.DialTimeout,
			TLSHandshakeTimeout:   c.Transport.TLSHandshakeTimeout,
			ResponseHeaderTimeout: c.Transport.ResponseHeaderTimeout,
			IdleConnTimeout:       c.Transport.IdleConnTimeout,
			MaxIdleConnsPerHost:   c.Transport.MaxIdleConnsPerHost,
		},
		health: healthcheck.Settings{
			Path:           c.HealthCheck.Path,
			Interval:       c.HealthCheck.Interval,
			Timeout:        c.HealthCheck.Timeout,
			UnhealthyAfter: c.HealthCheck.UnhealthyAfter,
			HealthyAfter:   c.HealthCheck.HealthyAfter,
		},
	}
	if pc := c.FastBreaker.PerClient; pc != nil {
		s.limiter.ClientQPS, s.limiter.ClientBurst = pc.QPS, pc.Burst
		s.limiter.MaxClients, s.limiter.IdleAfter = pc.MaxClients, pc.IdleAfter
		s.policy.ClientKeyHeader = pc.Header
	}
	s.policy.Classes, s.classes = classesFrom(c.Classes)
	s.policy.Fair = fairnessFrom(c.Fairness)
	if c.Fairness != nil {
		s.queue.MaxTenants = c.Fairness.MaxTenants
	}
	s.quotas = quotaLimits(c.Quotas)
	s.policy.Quotas = c.Quotas != nil
	s.policy.QuotaShadow = c.Quotas != nil && c.Quotas.Mode == config.QuotaShadow
	for model, l := range c.ModelLimits {
		if s.models == nil {
			s.models = map[string]breaker.LimiterSettings{}
		}
		s.models[model] = breaker.LimiterSettings{QPS: l.QPS, Burst: l.Burst}
	}
	for i, u := range c.Upstreams {
		if u.ForwardPriority {
			if s.policy.ForwardPriority == nil {
				s.policy.ForwardPriority = map[string]bool{}
			}
			s.policy.ForwardPriority[u.Name] = true
		}
		parsed, err := url.Parse(u.URL)
		if err != nil {
			return settings{}, fmt.Errorf("gatekeeper: upstreams[%d].url: %w", i, err)
		}
		s.upstreams = append(s.upstreams, upstreamSpec{name: u.Name, url: parsed,
			maxInflight: u.MaxInflight, minInflight: u.MinInflight, models: u.Models, discoverModels: u.DiscoverModels})
	}
	return s, nil
}

// classesFrom maps the policy's traffic classes onto the proxy's, and the
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
