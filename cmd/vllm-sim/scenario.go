package main

import (
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim/replay"
)

// withScenario is the replay's settings for a scenario: the scenario's
// traffic and pod over the command line's settings, except what a flag
// given on the command line set, which wins (a what-if on a scenario).
func (o *replayOptions) withScenario(sc replay.Scenario, d time.Duration, seed uint64) replay.Settings {
	s := o.base
	s.Trace.Duration, s.Trace.Seed = d, seed
	s = sc.Apply(s)
	for name, keep := range scenarioFlags() {
		if o.visited[name] {
			keep(&s, o.base)
		}
	}
	return s
}

// scenarioFlags are the flags whose fields a scenario may set, each with
// how to put the command line's value back.
func scenarioFlags() map[string]func(dst *replay.Settings, src replay.Settings) {
	return map[string]func(dst *replay.Settings, src replay.Settings){
		"base-qps":       func(d *replay.Settings, s replay.Settings) { d.Trace.BaseQPS = s.Trace.BaseQPS },
		"burst-qps":      func(d *replay.Settings, s replay.Settings) { d.Trace.BurstQPS = s.Trace.BurstQPS },
		"burst-every":    func(d *replay.Settings, s replay.Settings) { d.Trace.BurstEvery = s.Trace.BurstEvery },
		"burst-length":   func(d *replay.Settings, s replay.Settings) { d.Trace.BurstLength = s.Trace.BurstLength },
		"top-p-fraction": func(d *replay.Settings, s replay.Settings) { d.Trace.TopPFraction = s.Trace.TopPFraction },
		"prompt-logprobs-fraction": func(d *replay.Settings, s replay.Settings) {
			d.Trace.PromptLogprobsFraction = s.Trace.PromptLogprobsFraction
		},
		"n-fraction":   func(d *replay.Settings, s replay.Settings) { d.Trace.NFraction = s.Trace.NFraction },
		"n":            func(d *replay.Settings, s replay.Settings) { d.Trace.N = s.Trace.N },
		"gpu":          func(d *replay.Settings, s replay.Settings) { d.Engine.GPU = s.Engine.GPU },
		"model":        func(d *replay.Settings, s replay.Settings) { d.Engine.Model = s.Engine.Model },
		"max-num-seqs": func(d *replay.Settings, s replay.Settings) { d.Engine.MaxNumSeqs = s.Engine.MaxNumSeqs },
		"max-num-batched-tokens": func(d *replay.Settings, s replay.Settings) {
			d.Engine.MaxNumBatchedTokens = s.Engine.MaxNumBatchedTokens
		},
		"max-model-len":        func(d *replay.Settings, s replay.Settings) { d.Engine.MaxModelLen = s.Engine.MaxModelLen },
		"other-process-mib":    func(d *replay.Settings, s replay.Settings) { d.Engine.OtherProcessBytes = s.Engine.OtherProcessBytes },
		"tensor-parallel-size": func(d *replay.Settings, s replay.Settings) { d.Engine.TensorParallel = s.Engine.TensorParallel },
		"gpu-memory-utilization": func(d *replay.Settings, s replay.Settings) {
			d.Engine.GPUMemoryUtilization = s.Engine.GPUMemoryUtilization
		},
	}
}
