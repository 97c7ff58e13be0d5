package main

import (
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/sim"
	"github.com/gatekeeper-dev/gatekeeper/sim/replay"
)

// TestBurstEndToEnd is issue 5's end-to-end test, in virtual time: the
// simulated vLLM (package sim) behind gatekeeper's real fast breaker, slow
// breaker and admission queue, under config.yaml's defaults mapped by
// replay.WithPolicy, against the same engine and seed with nothing in front. It
// drives the replay's non-blocking core rather than HTTP so that it is
// deterministic and fast; the proxy's blocking calls wrap the same cores.
//
// The engine: H100-80G, Llama-3-8B, vLLM's defaults except
// gpu_memory_utilization 0.95. The traffic: the prompt-logprobs scenario
// (sim/replay/README.md), chat with an evaluation job scoring long
// documents with prompt_logprobs, whose logits vLLM's profile never runs.
//
// What is true, and asserted: without gatekeeper the pod OOMs again and
// again; config.yaml as shipped (it reads only the pod's /metrics) OOMs it
// no more often; with the allocator exporter and memory admission (each
// request's logits counted against the free memory the pod reports) it
// OOMs at most once (before the first reading of a cold pod) and serves far
// more within the SLO.
func TestBurstEndToEnd(t *testing.T) {
	t.Parallel()
	g, err := sim.GPUByName("H100-80G")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := replay.ScenarioByName("prompt-logprobs")
	if err != nil {
		t.Fatal(err)
	}
	base := sc.Apply(replay.Settings{Engine: sim.Settings{GPU: g, GPUMemoryUtilization: 0.95},
		Trace: replay.TraceSettings{Duration: 10 * time.Minute, Seed: 1}, SeriesEvery: 500 * time.Millisecond})
	run := func(p replay.Policy) replay.Result {
		t.Helper()
		s := replay.WithPolicy(config.Default(), base)
		s.Policy = p
		r, err := replay.Run(s)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: arrivals %d, attempts %d, requests %+v, OOMs %d, downtime %v, level time %v, SLO attainment %.3f",
			r.Policy, r.Arrivals, r.Attempts, r.Requests, r.OOMs, r.Downtime, r.LevelTime, r.SLOAttainment())
		return r
	}
	bare, shipped, exp := run(replay.None), run(replay.Gatekeeper), run(replay.GatekeeperExporter)
	if bare.OOMs < 3 || bare.Requests.Failed == 0 {
		t.Fatalf("unprotected: %d OOMs, %d requests failed; want the scoring requests to OOM the pod again and again", bare.OOMs, bare.Requests.Failed)
	}
	if shipped.OOMs > bare.OOMs {
		t.Errorf("config.yaml: %d OOMs against %d unprotected; want never more", shipped.OOMs, bare.OOMs)
	}
	if exp.OOMs > 1 || exp.SLOAttainment() < 2*bare.SLOAttainment() {
		t.Errorf("with the exporter and memory admission: %d OOMs, SLO attainment %.3f against %.3f unprotected; want at most one and twice as much",
			exp.OOMs, exp.SLOAttainment(), bare.SLOAttainment())
	}
}

// TestDefaultPolicyAt095: the chat trace does not OOM this engine at
// gpu_memory_utilization 0.95 (sim/replay/README.md), and the default
// policy is never critical there.
func TestDefaultPolicyAt095(t *testing.T) {
	t.Parallel()
	g, err := sim.GPUByName("H100-80G")
	if err != nil {
		t.Fatal(err)
	}
	base := replay.Settings{Engine: sim.Settings{GPU: g, GPUMemoryUtilization: 0.95},
		Trace: replay.TraceSettings{Duration: 10 * time.Minute, BaseQPS: 50, BurstQPS: 80,
			BurstEvery: 10 * time.Minute, BurstLength: 5 * time.Minute, Seed: 1}}
	run := func(s replay.Settings) replay.Result {
		t.Helper()
		r, err := replay.Run(s)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: arrivals %d, served %d, OOMs %d, level time %v",
			r.Policy, r.Arrivals, r.Outcomes.Served, r.OOMs, r.LevelTime)
		return r
	}
	if bare := run(base); bare.OOMs != 0 {
		t.Fatalf("unprotected at 0.95: %d OOMs; README says none", bare.OOMs)
	}

	def := replay.WithPolicy(config.Default(), base)
	def.Policy = replay.Gatekeeper
	gk := run(def)
	if gk.OOMs != 0 || gk.LevelTime[2] != 0 {
		t.Errorf("default policy: %d OOMs, critical for %v; want none", gk.OOMs, gk.LevelTime[2])
	}

}

// TestPromptLogprobsAt099 pins the prompt-logprobs scenario at
// gpu_memory_utilization 0.99 (sim/replay/README.md): the pod dies again
// and again; memory admission with the allocator exporter (memory.yaml)
// refuses or holds back the scoring requests whose logits would not fit,
// and the pod OOMs at most once and serves more.
func TestPromptLogprobsAt099(t *testing.T) {
	t.Parallel()
	g, err := sim.GPUByName("H100-80G")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := replay.ScenarioByName("prompt-logprobs")
	if err != nil {
		t.Fatal(err)
	}
	base := sc.Apply(replay.Settings{Engine: sim.Settings{GPU: g, GPUMemoryUtilization: 0.99},
		Trace: replay.TraceSettings{Duration: 10 * time.Minute, Seed: 1}})
	bare, err := replay.Run(base)
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.LoadFile("testdata/memory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ms := replay.WithPolicy(c, base)
	ms.Policy = replay.Gatekeeper
	mem, err := replay.Run(ms)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("unprotected: %d OOMs, served %d; memory admission: %d OOMs, served %d, refused 503 %d",
		bare.OOMs, bare.Outcomes.Served, mem.OOMs, mem.Outcomes.Served, mem.Outcomes.Overloaded)
	if bare.OOMs < 2 || mem.OOMs > 1 || mem.Outcomes.Served <= bare.Outcomes.Served {
		t.Errorf("unprotected %d OOMs (want ≥ 2), memory admission %d (want at most 1), served %d against %d (want more)",
			bare.OOMs, mem.OOMs, mem.Outcomes.Served, bare.Outcomes.Served)
	}
}
