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
}

// poolFlags defines -pods, -routing and -conversation-rate.
func poolFlags(fs *flag.FlagSet, o *poolOptions) {
	fs.IntVar(&o.pods, "pods", 1, "pods behind gatekeeper's one queue, each its own engine (1: the single pod of every earlier table)")
	fs.StringVar(&o.routing, "routing", "least-loaded", "comma-separated routings to compare: round-robin, least-loaded, prefix-only, gatekeeper (all: the four); with -pods above 1 or several routings the replay prints the routing table")
	fs.Float64Var(&o.convRate, "conversation-rate", 0, "multi-turn scenario: conversations opened per second (0: the scenario's)")
}

// parse checks the pool flags.
func (o *poolOptions) parse() error {
	if o.pods < 1 || o.pods > 64 {
		return fmt.Errorf("-pods = %d, want 1 to 64", o.pods)
	}
	if o.convRate < 0 {
		return fmt.Errorf("-conversation-rate = %v, want ≥ 0", o.convRate)
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
	if s.Source != nil && len(o.routings) > 1 {
		return nil, fmt.Errorf("-trace: one routing at a time (a trace file is read once)")
	}
	var runs []replay.Settings
	for _, rt := range o.routings {
		s.Routing = rt
		runs = append(runs, s)
	}
	return runs, nil
}

// routingTable says whether the runs print as the routing table.
func (o *poolOptions) routingTable() bool { return o.pods > 1 || len(o.routings) > 1 }
