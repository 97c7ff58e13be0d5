package replay

import (
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// multiTurnPool is the multi-turn scenario on a pool of four H100s.
func multiTurnPool(rt Routing, d time.Duration, seed uint64) Settings {
	sc, _ := ScenarioByName("multi-turn")
	return sc.Apply(Settings{Engine: sim.Settings{GPU: h100()}, Policy: Gatekeeper, Pods: 4, Routing: rt,
		Trace: TraceSettings{Duration: d, Seed: seed}})
}

// TestPrefixRoutingHitsMore: on the multi-turn scenario, routing by prefix
// finds more of each prompt in the pods' KV caches than round robin does,
// and every routing serves the same trace with every outcome counted.
func TestPrefixRoutingHitsMore(t *testing.T) {
	t.Parallel()
	res := map[Routing]Result{}
	for _, rt := range []Routing{RoundRobin, PrefixOnly, GatekeeperScore} {
		r, err := Run(multiTurnPool(rt, 3*time.Minute, 1))
		if err != nil {
			t.Fatal(err)
		}
		checkOutcomes(t, r)
		if r.Pool.Pods != 4 || len(r.Pool.Started) != 4 || r.Pool.PrefixQueries == 0 {
			t.Fatalf("%s: pool %+v, want 4 pods with prefix lookups", rt, r.Pool)
		}
		res[rt] = r
	}
	rr, po, gk := res[RoundRobin], res[PrefixOnly], res[GatekeeperScore]
	if rr.Arrivals != po.Arrivals || rr.Arrivals != gk.Arrivals {
		t.Fatalf("arrivals %d, %d, %d: the routings saw different traces", rr.Arrivals, po.Arrivals, gk.Arrivals)
	}
	if po.Pool.PrefixHitRate() <= rr.Pool.PrefixHitRate() || gk.Pool.PrefixHitRate() <= rr.Pool.PrefixHitRate() {
		t.Fatalf("prefix hit rate: round-robin %.3f, prefix-only %.3f, gatekeeper %.3f; want round-robin lowest",
			rr.Pool.PrefixHitRate(), po.Pool.PrefixHitRate(), gk.Pool.PrefixHitRate())
	}
	for i, n := range rr.Pool.Started { // round robin: the pods in turn
		if d := n - rr.Pool.Started[0]; d < -1 || d > 1 {
			t.Fatalf("round-robin started %v on the pods (pod %d), want within one of each other", rr.Pool.Started, i)
		}
	}
}

// TestCriticalPodGetsNoNewRequests: a neighbour on vllm-1's GPU takes 92 %
// of its free memory for a minute, which a memory_used rule reads as
// critical; from the round that finds it critical to the one that finds it
// not, no request starts there, while vllm-0 takes the traffic.
func TestCriticalPodGetsNoNewRequests(t *testing.T) {
	t.Parallel()
	s := Settings{Engine: sim.Settings{GPU: h100()}, Policy: Gatekeeper, Pods: 2, Routing: GatekeeperScore,
		Trace: TraceSettings{Duration: 3 * time.Minute, Seed: 1}}
	s.PodEngines = []sim.Settings{s.Engine, s.Engine}
	s.PodEngines[1].Neighbor = sim.Neighbor{Peaks: []sim.NeighborPeak{{At: time.Minute, For: time.Minute, Share: 0.92}}}
	s.Sources = []pressure.Kind{pressure.KindVLLM, pressure.KindNVML}
	s.Slow.Level.Rules = []breaker.Rule{{Signal: string(pressure.MemoryUsed), Degrade: 0.95, Shed: 0.97}}
	var rounds []Round
	s.Observer = func(r Round) { rounds = append(rounds, r) }
	res, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	critical, startedWhileCritical := 0, int64(0)
	for i := 1; i < len(rounds); i++ {
		prev := rounds[i-1]
		if prev.Decision.Upstreams[1].Level != breaker.Critical {
			continue
		}
		critical++
		startedWhileCritical += rounds[i].Started[1] - prev.Started[1]
		if rounds[i].Started[0] < prev.Started[0] {
			t.Fatalf("round %d: counts went back", i)
		}
	}
	if critical < 60 || startedWhileCritical != 0 {
		t.Fatalf("vllm-1 critical for %d rounds, %d requests started there meanwhile; want ≥ 60 rounds and none", critical, startedWhileCritical)
	}
	if res.Pool.Started[1] == 0 || res.Pool.Started[0] <= res.Pool.Started[1] || res.OOMs != 0 {
		t.Fatalf("started %v, OOMs %d: want both pods used, vllm-0 more, no OOM", res.Pool.Started, res.OOMs)
	}
}
