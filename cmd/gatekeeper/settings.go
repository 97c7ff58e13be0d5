package main

import (
	"fmt"
	"net/url"

	"github.com/gatekeeper-dev/gatekeeper/breaker"
	"github.com/gatekeeper-dev/gatekeeper/config"
	"github.com/gatekeeper-dev/gatekeeper/proxy"
	"github.com/gatekeeper-dev/gatekeeper/queue"
)

// settings is every package's Settings derived from one policy file. It is
// the one place where config keys meet package knobs.
type settings struct {
	limiter   breaker.LimiterSettings
	errors    breaker.ErrorSettings
	queue     queue.Settings
	policy    proxy.Policy
	transport proxy.TransportSettings
	health    proxy.HealthSettings
	upstreams []upstreamSpec
}

// upstreamSpec is one pod as the wiring needs it.
type upstreamSpec struct {
	name        string
	url         *url.URL
	maxInflight int
	minInflight int
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
		policy: proxy.Policy{
			Observe:          c.Mode == config.ModeObserve,
			MaxBodyBytes:     c.Server.MaxBodyBytes,
			RequestIDHeader:  c.Server.RequestIDHeader,
			CharsPerToken:    c.Estimate.CharsPerToken,
			DefaultMaxTokens: int64(c.Estimate.DefaultMaxTokens),
			MaxWait:          c.Queue.MaxWait,
			RetryAfter:       c.Shed.RetryAfter,
		},
		transport: proxy.TransportSettings{
			DialTimeout:           c.Transport.DialTimeout,
			TLSHandshakeTimeout:   c.Transport.TLSHandshakeTimeout,
			ResponseHeaderTimeout: c.Transport.ResponseHeaderTimeout,
			IdleConnTimeout:       c.Transport.IdleConnTimeout,
			MaxIdleConnsPerHost:   c.Transport.MaxIdleConnsPerHost,
		},
		health: proxy.HealthSettings{
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
	for i, u := range c.Upstreams {
		parsed, err := url.Parse(u.URL)
		if err != nil {
			return settings{}, fmt.Errorf("gatekeeper: upstreams[%d].url: %w", i, err)
		}
		s.upstreams = append(s.upstreams, upstreamSpec{name: u.Name, url: parsed,
			maxInflight: u.MaxInflight, minInflight: u.MinInflight})
	}
	return s, nil
}
