// Package discovery expands a policy's DNS-discovered upstreams: an upstream
// with a dns_interval stands for every address its host resolves to, and
// becomes one upstream per address (Expand). Hosts lists the names to look
// up, Resolve looks them up through a Lookup, keeping the last known
// addresses when a lookup fails, and Resolved.Equal tells a changed answer.
//
// discovery is pure apart from the Lookup it is handed: it imports no
// gatekeeper package but config, does no HTTP and does not log. The loop
// that re-resolves and re-applies the policy lives in cmd/gatekeeper.
package discovery

import (
	"context"
	"net"
	"net/url"
	"slices"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

// Lookup resolves a host name to its addresses.
type Lookup func(ctx context.Context, host string) ([]string, error)

// Resolved maps a discovered upstream's host to its sorted addresses.
type Resolved map[string][]string

// Hosts lists the hosts of the upstreams that use DNS discovery.
func Hosts(c *config.Config) []string {
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

// Resolve looks every discovery host up, keeping prev's addresses for a host
// whose lookup fails (a DNS hiccup must not empty the pool).
func Resolve(ctx context.Context, lookup Lookup, hosts []string, prev Resolved) Resolved {
	out := make(Resolved, len(hosts))
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

// Expand returns c with every discovery upstream replaced by one upstream
// per resolved address, named NAME/ADDRESS, its URL and the sources on the
// same host pointed at that address. An entry with no address yet stays as
// written, so the transport resolves it and the pool is never empty.
func Expand(c *config.Config, r Resolved) *config.Config {
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
			e.Sources = pointSources(u.Sources, pu.Hostname(), addr, addr)
			out.Upstreams = append(out.Upstreams, e)
		}
	}
	return &out
}

// pointSources is srcs with each URL on host pointed at addr, and each
// source with a URL named NAME@suffix, so an expanded pod's sources are its
// own.
func pointSources(srcs []config.Source, host, addr, suffix string) []config.Source {
	var out []config.Source
	for _, s := range srcs {
		if s.URL != "" {
			s.URL = withHost(s.URL, host, addr)
			s.Name = s.Name + "@" + suffix
		}
		out = append(out, s)
	}
	return out
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

// Equal reports whether r and o hold the same hosts with the same addresses.
func (r Resolved) Equal(o Resolved) bool {
	if len(r) != len(o) {
		return false
	}
	for k, v := range r {
		if !slices.Equal(v, o[k]) {
			return false
		}
	}
	return true
}
