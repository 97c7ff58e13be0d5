package demo

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/sim"
	"github.com/gatekeeper-dev/gatekeeper/sim/load"
	"github.com/gatekeeper-dev/gatekeeper/sim/replay"
)

// loadSource is the demo's own traffic (sim/load's Arrivals, the sequence
// -demo-load sends) as a replay trace, up to until. Each request's
// max_tokens is the load's; the pod stops it at a length drawn in
// [1, max_tokens] (stop), as sim/server does without ignore_eos.
type loadSource struct {
	arr   *load.Arrivals
	stop  *rand.Rand
	until time.Duration
}

func (s *loadSource) Err() error        { return nil }
func (s *loadSource) Classes() []string { return []string{"short", "long"} }

func (s *loadSource) Next() (replay.Arrival, bool) {
	a := s.arr.Next()
	if a.At >= s.until {
		return replay.Arrival{}, false
	}
	class := 0
	if a.Class == "long" {
		class = 1
	}
	return replay.Arrival{At: a.At, Class: class, Prompt: a.Prompt, MaxToken: a.MaxTokens,
		Output: 1 + s.stop.IntN(a.MaxTokens), TopP: a.TopP, PromptLogprobs: a.PromptLogprobs}, true
}

// demoRun is one run of the demo's traffic against one of its pods.
type demoRun struct {
	res    replay.Result
	phases []load.Phase // the phases run, in order
	boot   float64      // the pod's fragmentation ratio at boot
}

// phaseStart is when phase i of the run begins.
func (r demoRun) phaseStart(i int) time.Duration {
	var at time.Duration
	for _, p := range r.phases[:i] {
		at += p.Duration
	}
	return at
}

// fragmentation is the lowest and highest ratio read while the pod was alive.
func (r demoRun) fragmentation() (lo, hi float64) {
	lo = 99
	for _, s := range r.res.Series {
		if s.Alive {
			lo, hi = min(lo, s.Fragmentation), max(hi, s.Fragmentation)
		}
	}
	return lo, hi
}

// runDemoLoad runs the traffic -demo-load sends to pod (sim/load's
// Arrivals with pod's DocumentPromptLogprobs) for cycles cycles and then
// the steady phase that recovers, against pod in virtual time, behind
// policy: for replay.Gatekeeper the product's own slow path configured from
// the demo policy (the replay's Gatekeeper policy: pressure.Monitor,
// control.Controller, queue.Core, memory admission with the policy's
// vocab_size), changed by tweaks. Each request's max_tokens is the load's;
// the pod stops it at a length drawn in [1, max_tokens] (stop), as
// sim/server does without ignore_eos.
func runDemoLoad(t *testing.T, pod Pod, policy replay.Policy, cycles int, tweaks ...func(*replay.Settings)) demoRun {
	t.Helper()
	engine, err := pod.Settings()
	if err != nil {
		t.Fatal(err)
	}
	ls := load.Settings{DocumentPromptLogprobs: pod.DocumentPromptLogprobs} // what gatekeeper -demo-load runs
	cycle, err := ls.Phases()
	if err != nil {
		t.Fatal(err)
	}
	arr, err := ls.Arrivals()
	if err != nil {
		t.Fatal(err)
	}
	var phases []load.Phase
	for range cycles {
		phases = append(phases, cycle...)
	}
	phases = append(phases, cycle[0]) // the steady phase that recovers
	cfg, err := config.Parse(Policy("http://127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", 0))
	if err != nil {
		t.Fatal(err)
	}
	boot, err := sim.New(engine)
	if err != nil {
		t.Fatal(err)
	}
	mb := boot.MemoryBlocks("0")
	run := demoRun{phases: phases, boot: float64(mb.FreeBytes) / float64(mb.LargestFreeBlockBytes)}
	total := run.phaseStart(len(phases))
	// the demo policy as the replay maps any policy file (as -policy does)
	rs := replay.WithPolicy(cfg, replay.Settings{
		Engine:      engine,
		Trace:       replay.TraceSettings{Duration: total + time.Minute}, // the last arrivals drain
		Source:      &loadSource{arr: arr, stop: rand.New(rand.NewPCG(1, 2)), until: total},
		Policy:      policy,
		SeriesEvery: cfg.Pressure.Interval,
	})
	for _, tw := range tweaks {
		tw(&rs)
	}
	run.res, err = replay.Run(rs)
	if err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() {
		for i, s := range run.res.Series {
			if i%10 == 0 {
				t.Logf("t=%3.0fs kv %.2f frag %.4f level %v window %d queue %d running %d waiting %d alive %v",
					s.At.Seconds(), s.KVCacheUsage, s.Fragmentation, s.Level, s.Window, s.Queue, s.Running, s.Waiting, s.Alive)
			}
		}
	}
	return run
}

// TestDemoLoadPath runs the demo's traffic (sim/load's first cycle: steady,
// burst, steady, documents, then the steady phase that recovers) against the
// default demo pod behind the product's slow path configured from the demo
// policy (runDemoLoad). It pins what README.md says the demo shows: the
// bursts fill the KV cache, the pod turns degraded and the window is cut;
// the short chats drain ahead of the documents in recovery; and the
// fragmentation ratio does not move with the load on this engine (it is set
// at boot by the start-up tensors' stranded segment tails), so neither 1.2
// nor 1.5 is crossed and nothing is refused as critical.
func TestDemoLoadPath(t *testing.T) {
	run := runDemoLoad(t, Default, replay.Gatekeeper, 1)
	res, bootRatio := run.res, run.boot
	docsStart, docsEnd := run.phaseStart(3), run.phaseStart(4)
	lo, hi := run.fragmentation()
	peakKV, minWindowDocs := 0.0, MaxSeqs
	for _, s := range res.Series {
		if !s.Alive {
			continue
		}
		peakKV = max(peakKV, s.KVCacheUsage)
		if s.At >= docsStart && s.At < docsEnd+10*time.Second {
			minWindowDocs = min(minWindowDocs, s.Window)
		}
	}
	short, long := res.Classes[0], res.Classes[1]
	t.Logf("fragmentation at boot %.4f, under load %.4f–%.4f; peak KV %.2f; time degraded %v, critical %v; window in the document burst down to %d; outcomes %+v",
		bootRatio, lo, hi, peakKV, res.LevelTime[breaker.Degraded], res.LevelTime[breaker.Critical], minWindowDocs, res.Outcomes)
	t.Logf("recovery p99: short %v (%d served), long %v (%d served)", short.RecoveryP99, short.RecoveryServed, long.RecoveryP99, long.RecoveryServed)

	if hi-lo > 0.01 || lo < bootRatio-0.001 || hi >= 1.2 {
		t.Errorf("fragmentation %.4f–%.4f under load, boot %.4f: want it within 0.01 of boot and below 1.2 (README's claim)", lo, hi, bootRatio)
	}
	if peakKV < 0.95 || res.LevelTime[breaker.Degraded] == 0 || minWindowDocs >= MaxSeqs {
		t.Errorf("peak KV %.2f, degraded %v, window down to %d: want the KV cache full, the pod degraded and the window cut",
			peakKV, res.LevelTime[breaker.Degraded], minWindowDocs)
	}
	if res.LevelTime[breaker.Critical] != 0 || res.Outcomes.Overloaded != 0 || res.OOMs != 0 {
		t.Errorf("critical %v, overloaded %d, OOMs %d: want none", res.LevelTime[breaker.Critical], res.Outcomes.Overloaded, res.OOMs)
	}
	if short.RecoveryServed == 0 || long.RecoveryServed == 0 || short.RecoveryP99 >= long.RecoveryP99 {
		t.Errorf("recovery p99 short %v (%d), long %v (%d): want short chats ahead of documents",
			short.RecoveryP99, short.RecoveryServed, long.RecoveryP99, long.RecoveryServed)
	}
}

// TestDemoTightPath runs -demo-load against the tight demo pod (the KV cache
// squeezed to 0.968, the allocator read mid-step, prompt_logprobs documents)
// for two cycles and the steady phase that recovers, with gatekeeper and
// with nothing in front. It pins what docs/simulation.md says -demo-pod
// tight shows: the pod boots below 1.2; the ratio crosses 1.2 and the
// window is cut, and crosses 1.5 inside steps; recovery serves the short
// chats ahead of the documents; gatekeeper's pod never OOMs, while the same
// traffic OOMs the unprotected pod.
func TestDemoTightPath(t *testing.T) {
	run := runDemoLoad(t, Tight, replay.Gatekeeper, 2)
	none := runDemoLoad(t, Tight, replay.None, 2)
	// The same policy without its fragmentation rule: what the ratio's cuts
	// and 503s add to memory admission and the other rules (logged only).
	noFrag := runDemoLoad(t, Tight, replay.Gatekeeper, 2, func(s *replay.Settings) {
		s.Slow.Level.Rules = slices.DeleteFunc(slices.Clone(s.Slow.Level.Rules), func(r breaker.Rule) bool { return r.Signal == "fragmentation" })
	})
	res := run.res
	_, hi := run.fragmentation()
	_, hiNone := none.fragmentation()
	cutAt12, criticalAt15 := false, false
	for i, s := range res.Series {
		if !s.Alive || s.Fragmentation < 1.2 {
			continue
		}
		// The window is cut within a few rounds of a reading at 1.2 or more.
		for _, next := range res.Series[i:min(i+5, len(res.Series))] {
			cutAt12 = cutAt12 || next.Level >= breaker.Degraded && next.Window < MaxSeqs
		}
		criticalAt15 = criticalAt15 || s.Fragmentation >= 1.5 && s.Level == breaker.Critical
	}
	short, long := res.Classes[0], res.Classes[1]
	t.Logf("boot %.3f; peak fragmentation %.3f (unprotected %.3f); degraded %v, critical %v; OOMs %d (unprotected %d); outcomes %+v (unprotected %+v)",
		run.boot, hi, hiNone, res.LevelTime[breaker.Degraded], res.LevelTime[breaker.Critical], res.OOMs, none.res.OOMs, res.Outcomes, none.res.Outcomes)
	t.Logf("recovery p99: short %v (%d served), long %v (%d served); SLO goodput %.0f tokens/s (unprotected %.0f)",
		short.RecoveryP99, short.RecoveryServed, long.RecoveryP99, long.RecoveryServed, res.SLOGoodput(), none.res.SLOGoodput())
	oneReading := runDemoLoad(t, Tight, replay.Gatekeeper, 2, func(s *replay.Settings) {
		for i := range s.Slow.Level.Rules {
			s.Slow.Level.Rules[i].For = 0
		}
	})
	t.Logf("fragmentation rule on one reading (no for): OOMs %d, degraded %v, critical %v, outcomes %+v, SLO goodput %.0f tokens/s",
		oneReading.res.OOMs, oneReading.res.LevelTime[breaker.Degraded], oneReading.res.LevelTime[breaker.Critical], oneReading.res.Outcomes, oneReading.res.SLOGoodput())
	noMem := runDemoLoad(t, Tight, replay.Gatekeeper, 2, func(s *replay.Settings) { s.Memory = control.Memory{} })
	t.Logf("without memory admission: OOMs %d, degraded %v, critical %v, outcomes %+v, SLO goodput %.0f tokens/s",
		noMem.res.OOMs, noMem.res.LevelTime[breaker.Degraded], noMem.res.LevelTime[breaker.Critical], noMem.res.Outcomes, noMem.res.SLOGoodput())
	t.Logf("without the fragmentation rule: OOMs %d, degraded %v, critical %v, outcomes %+v, SLO goodput %.0f tokens/s",
		noFrag.res.OOMs, noFrag.res.LevelTime[breaker.Degraded], noFrag.res.LevelTime[breaker.Critical], noFrag.res.Outcomes, noFrag.res.SLOGoodput())

	if run.boot >= 1.2 {
		t.Errorf("boot ratio %.3f, want below 1.2 (a pod degraded from boot shows no path)", run.boot)
	}
	// The ratio crosses 1.5 inside steps; the default rule acts on a ratio
	// held for 2 s, which this pod's mid-step swings rarely give, so
	// critical (503) is logged, not asserted (docs/simulation.md).
	t.Logf("critical at 1.5: %v, shed %d", criticalAt15, res.Outcomes.Shed)
	if !cutAt12 || hi < 1.5 {
		t.Errorf("peak %.3f, window cut after 1.2 %v: want the ratio to cross 1.2 (window cut) and 1.5", hi, cutAt12)
	}
	if short.RecoveryServed == 0 || long.RecoveryServed == 0 || short.RecoveryP99 >= long.RecoveryP99 {
		t.Errorf("recovery p99 short %v (%d), long %v (%d): want short chats ahead of documents",
			short.RecoveryP99, short.RecoveryServed, long.RecoveryP99, long.RecoveryServed)
	}
	if res.OOMs != 0 || none.res.OOMs == 0 {
		t.Errorf("OOMs %d behind gatekeeper, %d unprotected: want none behind gatekeeper, some without", res.OOMs, none.res.OOMs)
	}
}
