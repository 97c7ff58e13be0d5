package slowpath

import (
	"math"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/route"
)

// The pod scorer's inputs (package route) come from the same round the
// controller acts on. The mapping lives here, not in control: the
// controller decides levels and windows and knows nothing of pod choice,
// and slowpath already holds the round's readings, the running policy and
// the queue's windows that the memory scorer needs.

// setPods passes every pod's round to the router: Waiting, KV usage and
// GPU memory headroom (PodState).
func (p *Path) setPods(cfg *config.Config, st pressure.State, qs queue.Stats) {
	if p.s.Router == nil {
		return
	}
	held := make(map[string]int64, len(qs.Windows))
	for _, w := range qs.Windows {
		held[w.Name] = w.MemoryHeld
	}
	for _, us := range st.Upstreams {
		u, ok := upstreamNamed(cfg, us.Name)
		if !ok {
			continue
		}
		need := held[us.Name] * max(u.VocabSize, 0) // bytes per vocabulary entry × vocabulary
		p.s.Router.SetPod(us.Name, PodState(us, fragmentationShed(cfg, u), need))
	}
}

// PodState is one pod's scorer inputs from a round: vLLM's
// num_requests_waiting and kv_cache_usage, and its memory headroom
// (route.MemoryHeadroom) from its fragmentation ratio against shed (the
// fragmentation rule's shed threshold; 0: none) and its free memory
// (memory_blocks) against need, the in-flight requests' estimated memory
// in bytes. A signal no source has reported, or a stale one, is unknown
// (NaN): that scorer counts 0.5.
func PodState(us pressure.UpstreamState, shed float64, need int64) route.Pod {
	free := fresh(us, pressure.FreeMemory)
	freeBytes := int64(0) // unknown: MemoryHeadroom leaves it out
	if free >= 1 && free < math.MaxInt64/2 {
		freeBytes = int64(free)
	}
	return route.Pod{
		Waiting: fresh(us, pressure.Waiting),
		KVUsage: fresh(us, pressure.KVCacheUsage),
		Memory:  route.MemoryHeadroom(fresh(us, pressure.Fragmentation), shed, freeBytes, need),
	}
}

// fresh is the round's value of sig, NaN when absent or stale.
func fresh(us pressure.UpstreamState, sig pressure.Signal) float64 {
	if v, ok := us.Signals[sig]; ok && !v.Stale {
		return v.Value
	}
	return math.NaN()
}

// fragmentationShed is the fragmentation rule's shed threshold for u: its
// own rule if it writes one, else the policy's; 0 without one.
func fragmentationShed(cfg *config.Config, u config.Upstream) float64 {
	sig := config.Signal(pressure.Fragmentation)
	r, ok := u.Rules[sig]
	if !ok {
		r = cfg.Pressure.Rules[sig]
	}
	if r.Shed == nil {
		return 0
	}
	return *r.Shed
}
