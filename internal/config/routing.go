package config

import "math"

// Routing is how a request's pod is chosen among those that have room
// (docs/routing.md): each pod gets a score, the weighted mean of four
// scorers, and the highest score takes the request. It applies only where
// a request may go to more than one pod; a deployment of one pod computes
// nothing. Every weight 0 turns scoring off: the pod with the most free
// window takes the request. A reload changes the weights and keeps what
// each pod's prefix index holds.
type Routing struct {
	// Scorers are the weights of the four scorers.
	Scorers Scorers `yaml:"scorers"`
	// PrefixCapacityBlocks is how many prefix blocks (64 prompt characters
	// each, about 16 tokens) each pod's prefix index remembers, least
	// recently sent forgotten first (at least 1; 16384 by default: about
	// 262,000 tokens of prefixes and 1.5 MiB per pod). Needs a restart.
	PrefixCapacityBlocks int `yaml:"prefix_capacity_blocks"`
}

// Scorers weigh the pod scorers (each at least 0; a weight's size matters
// only against the others). The defaults (prefix 1, load 2, KV 2, memory 2)
// were fitted on the replay's training seeds (sim/replay/README.md).
type Scorers struct {
	// Prefix weighs prefix affinity: the share of the prompt's leading
	// blocks the pod was recently sent, so probably still holds in its KV
	// cache.
	Prefix float64 `yaml:"prefix"`
	// Load weighs the free part of the pod's window, less the requests the
	// pod queues itself (vLLM's num_requests_waiting).
	Load float64 `yaml:"load"`
	// KVCache weighs the free part of the pod's KV cache (vLLM's
	// kv_cache_usage).
	KVCache float64 `yaml:"kv_cache"`
	// Memory weighs the pod's GPU memory headroom: its fragmentation ratio
	// against the fragmentation rule's shed threshold, and its free memory
	// (memory_blocks) against what its running requests are estimated to
	// need.
	Memory float64 `yaml:"memory"`
}

// Off reports that every weight is 0: scoring is off.
func (s Scorers) Off() bool { return s.Prefix == 0 && s.Load == 0 && s.KVCache == 0 && s.Memory == 0 }

func (k *checker) routing(r Routing) {
	for _, f := range []struct {
		path string
		v    float64
	}{{"routing.scorers.prefix", r.Scorers.Prefix}, {"routing.scorers.load", r.Scorers.Load},
		{"routing.scorers.kv_cache", r.Scorers.KVCache}, {"routing.scorers.memory", r.Scorers.Memory}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			k.add(f.path, "must be a finite number ≥ 0, got %v", f.v)
		}
	}
	k.atLeast("routing.prefix_capacity_blocks", int64(r.PrefixCapacityBlocks), 1)
}
