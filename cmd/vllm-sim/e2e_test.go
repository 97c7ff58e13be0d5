package main

import (
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/config"
	"github.com/gatekeeper-dev/gatekeeper/sim"
	"github.com/gatekeeper-dev/gatekeeper/sim/replay"
)

// TestBurstEndToEnd is issue 5's end-to-end test, in virtual time: the
// simulated vLLM (package sim) behind gatekeeper's real fast breaker, slow
// breaker and admission queue, under config.yaml's defaults mapped by
// applyPolicy, against the same engine and seed with nothing in front. It
// drives the replay's non-blocking core rather than HTTP so that it is
// deterministic and fast; the proxy's blocking calls wrap the same cores.
//
// The engine: H100-80G, Llama-3-8B, vLLM's defaults except
// gpu_memory_utilization 0.99 — a setting operators do use to buy KV cache,
// and the smallest change from the defaults under which the facts make this
// engine OOM at all (sim/replay/README.md: 0.9 to 0.98 give no OOM; at 0.99
// the 0.8 GiB outside vLLM's budget, plus the profiled peak, is less than
// the caching allocator's cache grows to under a burst of top-p batches).
// The trace: the replay's mix at 50 QPS for 5 minutes, then a burst at
// 80 QPS for 5 minutes.
//
// What is true, and asserted: without gatekeeper the steady load does not
// OOM the engine and the burst does, within seconds of its start; with
// gatekeeper nothing OOMs and the window is cut. How gatekeeper achieves
// it is asserted too, because it is the finding to read: at 0.99 NVML's
// memory_used is ≥ 0.98 from boot (weights and the pre-allocated KV cache
// are used memory), so the default memory_used rule (shed 0.98) holds the
// pod critical for the whole run and nearly every request is refused with a
// 503 — no OOM, but no service either (sim/replay/README.md).
func TestBurstEndToEnd(t *testing.T) {
	t.Parallel()
	g, err := sim.GPUByName("H100-80G")
	if err != nil {
		t.Fatal(err)
	}
	trace := replay.TraceSettings{Duration: 10 * time.Minute, BaseQPS: 50, BurstQPS: 80,
		BurstEvery: 10 * time.Minute, BurstLength: 5 * time.Minute, Seed: 1}
	base := replay.Settings{Engine: sim.Settings{GPU: g, GPUMemoryUtilization: 0.99}, Trace: trace,
		SeriesEvery: 500 * time.Millisecond}
	run := func(s replay.Settings) replay.Result {
		t.Helper()
		r, err := replay.Run(s)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: arrivals %d, served %d, failed %d, refused %d, OOMs %d, downtime %v, level time %v",
			r.Policy, r.Arrivals, r.Outcomes.Served, r.Outcomes.UpstreamError,
			r.Outcomes.RateLimited+r.Outcomes.Overloaded+r.Outcomes.QueueFull+r.Outcomes.QueueTimeout,
			r.OOMs, r.Downtime, r.LevelTime)
		return r
	}
	tr, err := replay.NewTrace(trace)
	if err != nil {
		t.Fatal(err)
	}

	steady := base
	steady.Trace.BurstQPS = steady.Trace.BaseQPS
	if r := run(steady); r.OOMs != 0 {
		t.Errorf("unprotected, no burst: %d OOMs, want 0 (the burst must be the cause)", r.OOMs)
	}

	bare := run(base)
	if bare.OOMs == 0 || bare.Outcomes.UpstreamError == 0 {
		t.Fatalf("unprotected burst: %d OOMs, %d failed requests; want the burst to OOM the engine", bare.OOMs, bare.Outcomes.UpstreamError)
	}
	for _, x := range bare.Series {
		if x.OOMs > 0 {
			if !tr.InBurst(x.At) {
				t.Errorf("unprotected: first OOM seen at %v, outside the burst", x.At)
			}
			break
		}
	}

	gs := applyPolicy(config.Default(), base)
	gs.Policy = replay.Gatekeeper
	gk := run(gs)
	if gk.OOMs != 0 || gk.Outcomes.UpstreamError != 0 {
		t.Fatalf("gatekeeper: %d OOMs, %d failed requests; want none", gk.OOMs, gk.Outcomes.UpstreamError)
	}
	maxWin := config.Default().Upstreams[0].MaxInflight
	minWin := maxWin
	for _, x := range gk.Series {
		minWin = min(minWin, x.Window)
	}
	if minWin >= maxWin {
		t.Errorf("gatekeeper: window never cut below %d", maxWin)
	}
	// The finding, pinned so that a change to the policy defaults or the
	// signals shows up here and in the README together.
	if gk.LevelTime[2] < gk.Horizon*9/10 {
		t.Errorf("gatekeeper: critical for %v of %v; README says the default memory_used rule holds it critical throughout", gk.LevelTime[2], gk.Horizon)
	}
	if served := float64(gk.Outcomes.Served) / float64(gk.Arrivals); served > 0.01 {
		t.Errorf("gatekeeper served %.1f%% of arrivals; README says nearly none at 0.99", 100*served)
	}
}

// TestDefaultPolicyAt095 pins the 0.95 finding of sim/replay/README.md ("At
// 0.95"): this engine does not OOM at gpu_memory_utilization 0.95, yet the
// default memory_used rule (shed 0.98) holds the pod critical and refuses
// nearly everything, while high-util.yaml (no memory_used rule) serves. When
// the defaults change (issue 15's step 4) this test and the README change
// together.
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

	def := applyPolicy(config.Default(), base)
	def.Policy = replay.Gatekeeper
	gk := run(def)
	// Critical from the first minute or so on, once the caching allocator has
	// grown past 0.98 of the device (8m50s of these 10 minutes, 100 % of 24 h).
	if gk.LevelTime[2] < gk.Horizon*3/4 {
		t.Errorf("default policy: critical for %v of %v; README says it stays critical", gk.LevelTime[2], gk.Horizon)
	}

	c, err := config.LoadFile("testdata/high-util.yaml")
	if err != nil {
		t.Fatal(err)
	}
	hs := applyPolicy(c, base)
	hs.Policy = replay.Gatekeeper
	hu := run(hs)
	if hu.OOMs != 0 || hu.LevelTime[2] != 0 {
		t.Errorf("high-util.yaml: %d OOMs, critical for %v; want none", hu.OOMs, hu.LevelTime[2])
	}
	// 9.1 % against 89 % of arrivals here; the burst's excess over the QPS
	// limit and the queue is refused under either policy.
	if hu.Outcomes.Served < 5*gk.Outcomes.Served {
		t.Errorf("high-util.yaml served %d, default %d; want the default to refuse most of what high-util serves",
			hu.Outcomes.Served, gk.Outcomes.Served)
	}
}
