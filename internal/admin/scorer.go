package admin

import (
	"math"

	"github.com/gatekeeper-dev/gatekeeper/internal/route"
)

// Scorer is an upstream's pod scorer inputs in State, as the last pressure
// round set them (route.Pod; docs/routing.md). A value absent is unknown:
// its scorer counts 0.5.
type Scorer struct {
	// Waiting is the requests the pod queues itself (vLLM's
	// num_requests_waiting).
	Waiting *float64 `json:"waiting,omitempty"`
	// KVUsage is the used part of its KV cache, 0 to 1.
	KVUsage *float64 `json:"kv_cache_usage,omitempty"`
	// MemoryHeadroom is its GPU memory headroom, 0 to 1.
	MemoryHeadroom *float64 `json:"memory_headroom,omitempty"`
}

func scorerOf(p route.Pod) *Scorer {
	known := func(v float64) *float64 {
		if math.IsNaN(v) {
			return nil
		}
		return &v
	}
	return &Scorer{Waiting: known(p.Waiting), KVUsage: known(p.KVUsage), MemoryHeadroom: known(p.Memory)}
}
