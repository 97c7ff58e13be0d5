package policy

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/route"
)

const twoPods = "upstreams: [{name: a, url: 'http://127.0.0.1:1'}, {name: b, url: 'http://127.0.0.1:2'}]\n"

// TestRoutingAcrossReloads: the policy's weights reach the router, a
// reload changes them and keeps what the pods' prefix indexes hold, a pod
// the policy drops is forgotten, and prefix blocks are asked for only
// while scoring runs with a prefix weight over more than one pod.
func TestRoutingAcrossReloads(t *testing.T) {
	r := newRig(t, twoPods, nil)
	blocks := route.Blocks(nil, "m", []byte(strings.Repeat("shared system prompt ", 20)))
	r.router.Chose("a", blocks)
	r.router.SetPod("b", route.Pod{Waiting: 1, KVUsage: 0.5, Memory: 0.5})
	steps := []struct {
		name    string
		policy  string
		weights route.Weights
		prefix  bool // decide's Policy.Prefix
		bKnown  bool
	}{
		{"defaults", twoPods, route.Weights{Prefix: 1, Load: 2, KV: 2, Memory: 2}, true, true},
		{"weights reloaded", twoPods + "routing: {scorers: {prefix: 1, load: 5}}\n", route.Weights{Prefix: 1, Load: 5, KV: 2, Memory: 2}, true, true},
		{"no prefix weight", twoPods + "routing: {scorers: {prefix: 0}}\n", route.Weights{Load: 2, KV: 2, Memory: 2}, false, true},
		{"every weight 0: off", twoPods + "routing: {scorers: {prefix: 0, load: 0, kv_cache: 0, memory: 0}}\n", route.Weights{}, false, true},
		{"b removed, one pod", "upstreams: [{name: a, url: 'http://127.0.0.1:1'}]\n", route.Weights{Prefix: 1, Load: 2, KV: 2, Memory: 2}, false, false},
	}
	for _, s := range steps {
		if err := r.k.Set(mustParse(t, s.policy)); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := r.router.Weights(); got != s.weights {
			t.Errorf("%s: weights %+v, want %+v", s.name, got, s.weights)
		}
		if got := r.k.t.Core.Policy().Prefix; got != s.prefix {
			t.Errorf("%s: Policy.Prefix = %v, want %v", s.name, got, s.prefix)
		}
		if _, known := r.router.PodState("b"); known != s.bKnown {
			t.Errorf("%s: b known = %v, want %v", s.name, known, s.bKnown)
		}
		if got := r.router.Explain("a", 0, 1, blocks).Prefix; got != 1 {
			t.Errorf("%s: a's prefix match %v, want 1 (its index kept across reloads)", s.name, got)
		}
	}
}

// TestNewRouterRegistersPrefixBlocks: the router's hit and miss counts are
// gatekeeper_route_prefix_blocks_total.
func TestNewRouterRegistersPrefixBlocks(t *testing.T) {
	reg := prometheus.NewRegistry()
	k := New(Options{Registerer: reg, Pressure: pressure.NewRunner(pressure.RunnerSettings{})})
	raw := mustParse(t, twoPods)
	p, err := k.Prepare(raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	router, err := p.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	blocks := route.Blocks(nil, "m", []byte(strings.Repeat("x", 3*route.BlockChars)))
	router.Chose("a", blocks)
	router.Chose("a", blocks)
	want := `
# HELP gatekeeper_route_prefix_blocks_total Prompt prefix blocks (64 characters) of the requests granted a pod while pod scoring runs, by whether the pod's prefix index held them (hit) or not (miss): the prefix affinity achieved.
# TYPE gatekeeper_route_prefix_blocks_total counter
gatekeeper_route_prefix_blocks_total{result="hit"} 3
gatekeeper_route_prefix_blocks_total{result="miss"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gatekeeper_route_prefix_blocks_total"); err != nil {
		t.Error(err)
	}
}

// TestRoutingDefaultCapacity: the policy's default prefix capacity is the
// router's (config cannot import route).
func TestRoutingDefaultCapacity(t *testing.T) {
	if got := config.Default().Routing.PrefixCapacityBlocks; got != route.DefaultCapacity {
		t.Errorf("routing.prefix_capacity_blocks default = %d, want route.DefaultCapacity %d", got, route.DefaultCapacity)
	}
}
