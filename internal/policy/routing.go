package policy

import (
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

// NewRouter builds the pod scorer of the Plan's policy. The caller hands it
// to the Keeper (Targets.Router), which keeps it across reloads: a reload
// changes its weights (Apply) and keeps what the pods' prefix indexes hold;
// prefix_capacity_blocks needs a restart.
func (p *Plan) NewRouter() (*route.Router, error) { return route.New(p.s.Routing) }

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
