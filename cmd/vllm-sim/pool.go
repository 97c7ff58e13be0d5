package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/gatekeeper-dev/gatekeeper/sim/replay"
)

// poolOptions are the replay's pool flags.
type poolOptions struct {
	pods     int
	routing  string
	routings []replay.Routing
	convRate float64
	scaling  string
	scaleSet bool // -autoscale was given
	scalings []replay.Scaling
	scale    replay.AutoscaleSettings
}

// poolFlags defines -pods, -routing and -conversation-rate.
func poolFlags(fs *flag.FlagSet, o *poolOptions) {
	fs.IntVar(&o.pods, "pods", 1, "pods behind gatekeeper's one queue, each its own engine (1: the single pod of every earlier table)")
	fs.StringVar(&o.routing, "routing", "least-loaded", "comma-separated routings to compare: round-robin, least-loaded, prefix-only, gatekeeper (all: the four); with -pods above 1 or several routings the replay prints the routing table")
	fs.Float64Var(&o.convRate, "conversation-rate", 0, "multi-turn scenario: conversations opened per second (0: the scenario's)")
	fs.StringVar(&o.scaling, "autoscale", "static", "comma-separated ways to size the pool to compare: static (-pods throughout), gatekeeper (gatekeeper_desired_replicas: internal/scale's estimator), kv-usage (an HPA on mean KV-cache usage); with more than static the replay prints the scaling table")
	fs.DurationVar(&o.scale.StartDelay, "start-delay", 0, "-autoscale: a new pod's start time (0: the estimator's horizon, 3m)")
	fs.IntVar(&o.scale.Scale.MaxReplicas, "max-pods", 0, "-autoscale: the most pods (0: the estimator's default, 10)")
}

// parse checks the pool flags.
func (o *poolOptions) parse() error {
	if o.pods < 1 || o.pods > 64 {
		return fmt.Errorf("-pods = %d, want 1 to 64", o.pods)
	}
	if o.convRate < 0 {
		return fmt.Errorf("-conversation-rate = %v, want ≥ 0", o.convRate)
	}
	o.scalings = nil
	for _, name := range strings.Split(o.scaling, ",") {
		sc, err := replay.ParseScaling(strings.TrimSpace(name))
		if err != nil {
			return err
		}
		o.scalings = append(o.scalings, sc)
	}
	o.routings = nil
	if o.routing == "all" {
		o.routings = replay.Routings()
		return nil
	}
	for _, name := range strings.Split(o.routing, ",") {
		rt, err := replay.ParseRouting(strings.TrimSpace(name))
		if err != nil {
			return err
		}
		o.routings = append(o.routings, rt)
	}
	return nil
}

// withRoutings is s on the pool, once per routing.
func (o *poolOptions) withRoutings(s replay.Settings) ([]replay.Settings, error) {
	s.Pods = o.pods
	if o.convRate > 0 {
		if s.Conversations.Rate == 0 {
			return nil, fmt.Errorf("-conversation-rate: scenario %q has no conversations (multi-turn has)", s.Scenario)
		}
		s.Conversations.Rate = o.convRate
	}
	if s.Source != nil && len(o.routings)*len(o.scalings) > 1 {
		return nil, fmt.Errorf("-trace: one routing at a time (a trace file is read once)")
	}
	var runs []replay.Settings
	for _, sc := range o.scalings {
		for _, rt := range o.routings {
			s.Routing, s.Autoscale = rt, o.scale
			s.Autoscale.Mode = sc
			runs = append(runs, s)
		}
	}
	return runs, nil
}

// routingTable says whether the runs print as the routing table.
func (o *poolOptions) routingTable() bool { return o.pods > 1 || len(o.routings) > 1 }

// scalingTable says whether the runs print as the scaling table.
func (o *poolOptions) scalingTable() bool {
	return o.scaleSet || len(o.scalings) > 1 || len(o.scalings) == 1 && o.scalings[0] != replay.StaticPool
}
