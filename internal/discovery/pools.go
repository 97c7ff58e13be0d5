package discovery

import (
	"maps"
	"net"
	"net/url"
	"slices"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

// Pools maps each InferencePool (its namespace filled in) to the "ip:port"
// endpoints of its ready pods, sorted. A pool absent from the map is not
// known yet; one present with no endpoints has no ready pod.
type Pools map[config.InferencePool][]string

// Equal reports whether p and o hold the same pools with the same endpoints.
func (p Pools) Equal(o Pools) bool {
	return maps.EqualFunc(p, o, func(a, b []string) bool { return slices.Equal(a, b) })
}

// PoolRefs lists the InferencePools the policy's upstreams stand for, each
// namespace "" replaced by own (gatekeeper's namespace).
func PoolRefs(c *config.Config, own string) []config.InferencePool {
	var refs []config.InferencePool
	for _, u := range c.Upstreams {
		if u.InferencePool == nil {
			continue
		}
		ref := poolRef(*u.InferencePool, own)
		if !slices.Contains(refs, ref) {
			refs = append(refs, ref)
		}
	}
	return refs
}

func poolRef(p config.InferencePool, own string) config.InferencePool {
	if p.Namespace == "" {
		p.Namespace = own
	}
	return p
}

// ExpandPools returns c with every inference_pool upstream replaced by one
// upstream per endpoint of its pool, named NAME/IP:PORT: the url's host and
// port become the endpoint's, and sources on the url's host (the "pod"
// placeholder) point at the pod's IP, keeping their own port. A pool with no
// endpoint, or not known yet, contributes no upstream: the pods it stands
// for are not there to be sent work.
func ExpandPools(c *config.Config, p Pools, own string) *config.Config {
	out := *c
	out.Upstreams = nil
	for _, u := range c.Upstreams {
		if u.InferencePool == nil {
			out.Upstreams = append(out.Upstreams, u)
			continue
		}
		pu, err := url.Parse(u.URL)
		if err != nil {
			continue // validated at load
		}
		for _, ep := range p[poolRef(*u.InferencePool, own)] {
			ip, _, err := net.SplitHostPort(ep)
			if err != nil {
				continue
			}
			e := u
			e.InferencePool = nil
			e.Name = u.Name + "/" + ep
			eu := *pu
			eu.Host = ep
			e.URL = eu.String()
			e.Sources = pointSources(u.Sources, pu.Hostname(), ip, ep)
			out.Upstreams = append(out.Upstreams, e)
		}
	}
	return &out
}
