package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/config"
)

// lookupFunc resolves a host name to its addresses.
type lookupFunc func(ctx context.Context, host string) ([]string, error)

// resolved maps a discovered upstream's host to its sorted addresses.
type resolved map[string][]string

// discoveryHosts lists the hosts of the upstreams that use DNS discovery.
func discoveryHosts(c *config.Config) []string {
	var hosts []string
	for _, u := range c.Upstreams {
		if u.DNSInterval <= 0 {
			continue
		}
		if pu, err := url.Parse(u.URL); err == nil && !slices.Contains(hosts, pu.Hostname()) {
			hosts = append(hosts, pu.Hostname())
		}
	}
	return hosts
}

// resolve looks every discovery host up, keeping prev's addresses for a host
// whose lookup fails (a DNS hiccup must not empty the pool).
func resolve(ctx context.Context, lookup lookupFunc, hosts []string, prev resolved) resolved {
	out := make(resolved, len(hosts))
	for _, h := range hosts {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		addrs, err := lookup(ctx, h)
		cancel()
		if err != nil || len(addrs) == 0 {
			out[h] = prev[h]
			continue
		}
		slices.Sort(addrs)
		out[h] = slices.Compact(addrs)
	}
	return out
}

// expand returns c with every discovery upstream replaced by one upstream
// per resolved address, named NAME/ADDRESS, its URL and the sources on the
// same host pointed at that address. An entry with no address yet stays as
// written, so the transport resolves it and the pool is never empty.
func expand(c *config.Config, r resolved) *config.Config {
	out := *c
	out.Upstreams = nil
	for _, u := range c.Upstreams {
		pu, err := url.Parse(u.URL)
		addrs := r[pu.Hostname()]
		if u.DNSInterval <= 0 || err != nil || len(addrs) == 0 {
			out.Upstreams = append(out.Upstreams, u)
			continue
		}
		for _, addr := range addrs {
			e := u
			e.Name = u.Name + "/" + addr
			e.URL = withHost(u.URL, pu.Hostname(), addr)
			e.Sources = nil
			for _, s := range u.Sources {
				if s.URL != "" {
					s.URL = withHost(s.URL, pu.Hostname(), addr)
					s.Name = s.Name + "@" + addr
				}
				e.Sources = append(e.Sources, s)
			}
			out.Upstreams = append(out.Upstreams, e)
		}
	}
	return &out
}

// withHost replaces raw's host with addr when it is host, keeping the port.
func withHost(raw, host, addr string) string {
	pu, err := url.Parse(raw)
	if err != nil || pu.Hostname() != host {
		return raw
	}
	if port := pu.Port(); port != "" {
		pu.Host = net.JoinHostPort(addr, port)
	} else {
		pu.Host = addr
		if ip := net.ParseIP(addr); ip != nil && ip.To4() == nil {
			pu.Host = "[" + addr + "]"
		}
	}
	return pu.String()
}

// discover re-resolves the discovery hosts every interval (the shortest
// dns_interval of the policy) and applies a changed address set at once.
func (a *app) discover(ctx context.Context) {
	for {
		interval := time.Duration(0)
		for _, u := range a.raw.Load().Upstreams {
			if u.DNSInterval > 0 && (interval == 0 || u.DNSInterval < interval) {
				interval = u.DNSInterval
			}
		}
		if interval == 0 {
			interval = 10 * time.Second // nothing to discover now; look again after a reload
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := a.rediscover(ctx); err != nil {
			a.log.LogAttrs(ctx, slog.LevelError, "discovered upstreams not applied", slog.String("err", err.Error()))
		}
	}
}

// rediscover resolves now and applies the policy again if addresses changed.
func (a *app) rediscover(ctx context.Context) error {
	raw := a.raw.Load()
	hosts := discoveryHosts(raw)
	if len(hosts) == 0 {
		return nil
	}
	a.mu.Lock()
	prev := a.resolved
	a.mu.Unlock()
	next := resolve(ctx, a.lookup, hosts, prev)
	if equalResolved(prev, next) {
		return nil
	}
	err := a.commit(raw, next, raw)
	switch {
	case errors.Is(err, errPolicyMoved):
		a.log.LogAttrs(ctx, slog.LevelDebug, "discovery round dropped: the policy was reloaded during the lookup")
		return nil
	case err != nil:
		return err
	}
	a.log.LogAttrs(ctx, slog.LevelInfo, "upstream addresses changed", slog.String("state", "discovered"),
		slog.Any("addresses", next))
	return nil
}

func equalResolved(a, b resolved) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}
