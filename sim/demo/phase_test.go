package demo

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/breaker"
	"github.com/gatekeeper-dev/gatekeeper/config"
	"github.com/gatekeeper-dev/gatekeeper/control"
	"github.com/gatekeeper-dev/gatekeeper/queue"
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
		Output: 1 + s.stop.IntN(a.MaxTokens), TopP: a.TopP}, true
}

// TestDemoLoadPath runs the demo's traffic (sim/load's first cycle: steady,
// burst, steady, documents, then the steady phase that recovers) against the
// demo pod in virtual time, behind the product's own slow path configured
// from the demo policy (the replay's Gatekeeper policy: pressure.Monitor,
// control.Controller, queue.Core). It pins what README.md says the demo
// shows: the bursts fill the KV cache, the pod turns degraded and the window
// is cut; the short chats drain ahead of the documents in recovery; and the
// fragmentation ratio does not move with the load on this engine (it is set
// at boot by the start-up tensors' stranded segment tails), so neither 1.2
// nor 1.5 is crossed and nothing is refused as critical.
func TestDemoLoadPath(t *testing.T) {
	pod, err := PodSettings()
	if err != nil {
		t.Fatal(err)
	}
	ls := load.Settings{} // what gatekeeper -demo-load runs
	phases, err := ls.Phases()
	if err != nil {
		t.Fatal(err)
	}
	arr, err := ls.Arrivals()
	if err != nil {
		t.Fatal(err)
	}
	phases = append(phases, phases[0]) // one cycle, then the steady phase that recovers
	cfg, err := config.Parse(Policy("http://127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", 0))
	if err != nil {
		t.Fatal(err)
	}
	boot, err := sim.New(pod)
	if err != nil {
		t.Fatal(err)
	}
	mb := boot.MemoryBlocks("0")
	bootRatio := float64(mb.FreeBytes) / float64(mb.LargestFreeBlockBytes)

	var total time.Duration
	for _, p := range phases {
		total += p.Duration
	}
	res, err := replay.Run(replay.Settings{
		Engine:  pod,
		Trace:   replay.TraceSettings{Duration: total + time.Minute}, // the last arrivals drain
		Source:  &loadSource{arr: arr, stop: rand.New(rand.NewPCG(1, 2)), until: total},
		Policy:  replay.Gatekeeper,
		Limiter: breaker.LimiterSettings{QPS: cfg.FastBreaker.QPS, Burst: cfg.FastBreaker.Burst},
		Slow:    control.SlowSettings(cfg, cfg.Upstreams[0]),
		Queue: queue.Settings{MaxLength: cfg.Queue.MaxLength, MaxTokens: cfg.Queue.MaxTokens,
			StarvationAfter: cfg.Queue.StarvationAfter},
		MaxWait:              cfg.Queue.MaxWait,
		Interval:             cfg.Pressure.Interval,
		EmptyCacheOnDegraded: true, // the demo policy's degraded hook
		SeriesEvery:          cfg.Pressure.Interval,
	})
	if err != nil {
		t.Fatal(err)
	}
	docsStart := phases[0].Duration + phases[1].Duration + phases[2].Duration
	docsEnd := docsStart + phases[3].Duration
	lo, hi, peakKV, minWindowDocs := 99.0, 0.0, 0.0, MaxSeqs
	for _, s := range res.Series {
		if !s.Alive {
			continue
		}
		lo, hi, peakKV = min(lo, s.Fragmentation), max(hi, s.Fragmentation), max(peakKV, s.KVCacheUsage)
		if s.At >= docsStart && s.At < docsEnd+10*time.Second {
			minWindowDocs = min(minWindowDocs, s.Window)
		}
	}
	for i, s := range res.Series {
		if i%10 == 0 && testing.Verbose() {
			t.Logf("t=%3.0fs kv %.2f frag %.4f level %v window %d queue %d running %d waiting %d", s.At.Seconds(), s.KVCacheUsage, s.Fragmentation, s.Level, s.Window, s.Queue, s.Running, s.Waiting)
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
