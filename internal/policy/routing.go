package policy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/route"
)

// routingFrom maps the policy's routing section onto route's Settings.
func routingFrom(r config.Routing) route.Settings {
	s := r.Scorers
	return route.Settings{Weights: route.Weights{Prefix: s.Prefix, Load: s.Load, KV: s.KVCache, Memory: s.Memory},
		Capacity: r.PrefixCapacityBlocks}
}

// scoring reports whether pod scoring runs for the policy: some weight is
// above 0 and there is more than one pod to choose from.
func scoring(c *config.Config) bool {
	return !c.Routing.Scorers.Off() && len(c.Upstreams) > 1
}

// NewRouter builds the pod scorer of the Plan's policy and registers its
// gatekeeper_route_prefix_blocks_total with the Keeper's Registerer. The
// caller hands it to the Keeper (Targets.Router), which keeps it across
// reloads: a reload changes its weights (Apply) and keeps what the pods'
// prefix indexes hold; prefix_capacity_blocks needs a restart. Call it
// once.
func (p *Plan) NewRouter() (*route.Router, error) {
	r, err := route.New(p.s.Routing)
	if err != nil {
		return nil, err
	}
	if reg := p.k.o.Registerer; reg != nil {
		if err := reg.Register(prefixBlocks{r}); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// prefixBlocks exports the router's hit and miss counts.
type prefixBlocks struct{ r *route.Router }

var prefixBlocksDesc = prometheus.NewDesc("gatekeeper_route_prefix_blocks_total",
	"Prompt prefix blocks (64 characters) of the requests granted a pod while pod scoring runs, by whether the pod's prefix index held them (hit) or not (miss): the prefix affinity achieved.",
	[]string{"result"}, nil)

func (c prefixBlocks) Describe(ch chan<- *prometheus.Desc) { ch <- prefixBlocksDesc }

func (c prefixBlocks) Collect(ch chan<- prometheus.Metric) {
	hit, miss := c.r.Counted()
	ch <- prometheus.MustNewConstMetric(prefixBlocksDesc, prometheus.CounterValue, float64(hit), "hit")
	ch <- prometheus.MustNewConstMetric(prefixBlocksDesc, prometheus.CounterValue, float64(miss), "miss")
}

// applyRouting sets the router's weights and makes it the queue's scorer
// while scoring runs (nil otherwise: the window with the most room), and
// forgets the pods removed.
func (p *Plan) applyRouting(removed []string) {
	t := &p.k.t
	if t.Router == nil {
		return
	}
	for _, name := range removed {
		t.Router.Forget(name)
	}
	p.k.applied("routing", t.Router.SetWeights(p.s.Routing.Weights))
	if scoring(p.cfg) {
		t.Queue.SetScorer(t.Router)
	} else {
		t.Queue.SetScorer(nil)
	}
}
