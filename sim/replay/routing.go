package replay

import (
	"fmt"
	"math"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/route"
)

// Routing is how gatekeeper's queue picks a pod for a request among the
// pods whose windows have room (Settings.Routing): the comparison of
// sim/replay/README.md's routing tables.
type Routing int

// The routings compared.
const (
	// LeastLoaded is the queue's own choice without a scorer: the window
	// with the most room (then the first by name).
	LeastLoaded Routing = iota
	// RoundRobin gives the pods requests in turn (a queue.Scorer that
	// rotates), skipping those without room.
	RoundRobin
	// PrefixOnly is route.Router with Weights{Prefix: 1}: the pod believed
	// to hold most of the prompt's leading blocks; ties (no pod holds any)
	// fall to the most room.
	PrefixOnly
	// GatekeeperScore is route.Router with the policy's default weights
	// (GatekeeperWeights), fed each round with each pod's waiting requests,
	// KV-cache usage and memory headroom.
	GatekeeperScore
)

// GatekeeperWeights are the default weights of routing.scorers, as the
// policy file's defaults give them (config.Default).
var GatekeeperWeights = WeightsOf(config.Default().Routing.Scorers)

// WeightsOf maps the policy's routing.scorers onto route's Weights.
func WeightsOf(s config.Scorers) route.Weights {
	return route.Weights{Prefix: s.Prefix, Load: s.Load, KV: s.KVCache, Memory: s.Memory}
}

// Routings lists every routing, in the order tables show them.
func Routings() []Routing { return []Routing{RoundRobin, LeastLoaded, PrefixOnly, GatekeeperScore} }

// String returns the routing's name as -routing spells it.
func (r Routing) String() string {
	switch r {
	case LeastLoaded:
		return "least-loaded"
	case RoundRobin:
		return "round-robin"
	case PrefixOnly:
		return "prefix-only"
	case GatekeeperScore:
		return "gatekeeper"
	}
	return "unknown"
}

// ParseRouting is the routing String names.
func ParseRouting(name string) (Routing, error) {
	for _, r := range Routings() {
		if r.String() == name {
			return r, nil
		}
	}
	return 0, fmt.Errorf("replay: unknown routing %q (want round-robin, least-loaded, prefix-only or gatekeeper)", name)
}

// setRouting gives the queue the run's scorer.
func (r *runner) setRouting() error {
	var w route.Weights
	switch r.s.Routing {
	case LeastLoaded:
		return nil
	case RoundRobin:
		r.core.SetScorer(&rotation{})
		return nil
	case PrefixOnly:
		w = route.Weights{Prefix: 1}
	case GatekeeperScore:
		w = GatekeeperWeights
		if r.s.Weights != nil {
			w = *r.s.Weights
		}
	default:
		return fmt.Errorf("replay: Routing %d unknown", r.s.Routing)
	}
	rt, err := route.New(route.Settings{Weights: w})
	if err != nil {
		return err
	}
	r.router = rt
	r.core.SetScorer(rt)
	return nil
}

// rotation is round robin as a queue.Scorer: the pod after the last one
// chosen scores highest, the one after it next, and so on around the pool
// (of pods numbered below rotationSpan, whatever their number).
type rotation struct {
	next int
}

const rotationSpan = 1 << 16

var _ queue.Scorer = (*rotation)(nil)

func (r *rotation) Score(upstream string, _, _ int, _ []uint64) float64 {
	return float64(rotationSpan - (podIndex(upstream)-r.next+rotationSpan)%rotationSpan)
}

func (r *rotation) Chose(upstream string, _ []uint64) { r.next = podIndex(upstream) + 1 }

// podIndex is i for podName(i).
func podIndex(name string) int {
	var i int
	if _, err := fmt.Sscanf(name, "vllm-%d", &i); err != nil {
		panic(fmt.Sprintf("replay: %q is not a pod of the pool", name))
	}
	return i
}

// observed tells the router what this round read of each pod, as
// gatekeeper's slow path will (route.Pod): vLLM's waiting requests and KV
// usage, and the memory headroom (route.MemoryHeadroom) from the
// fragmentation ratio against the fragmentation rule's shed threshold and
// the free memory against the memory estimates in flight to the pod. A
// signal that is stale or that no source yields is unknown (NaN).
func (r *runner) observed(st pressure.State) {
	if r.router == nil {
		return
	}
	shed := 0.0
	for _, rule := range r.s.Slow.Level.Rules {
		if rule.Signal == string(pressure.Fragmentation) {
			shed = rule.Shed
		}
	}
	held := map[string]int64{}
	for _, w := range r.core.Stats().Windows {
		held[w.Name] = w.MemoryHeld
	}
	for _, p := range r.pods {
		us, _ := st.Upstream(p.name)
		free := fresh(us, pressure.FreeMemory)
		freeBytes := int64(0)
		if !math.IsNaN(free) {
			freeBytes = int64(free)
		}
		r.router.SetPod(p.name, route.Pod{Waiting: fresh(us, pressure.Waiting), KVUsage: fresh(us, pressure.KVCacheUsage),
			Memory: route.MemoryHeadroom(fresh(us, pressure.Fragmentation), shed, freeBytes, held[p.name])})
	}
}

// fresh is a signal's value when fresh, else NaN.
func fresh(us pressure.UpstreamState, sig pressure.Signal) float64 {
	if v, ok := us.Signals[sig]; ok && !v.Stale {
		return v.Value
	}
	return math.NaN()
}

// podBack is a pod that the health check sees back after a restart: its
// KV cache is empty, so the router forgets the prefixes it sent there.
func (r *runner) podBack(p *pod) {
	if r.router != nil {
		r.router.Forget(p.name)
	}
}
