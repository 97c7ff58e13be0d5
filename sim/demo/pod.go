// Package demo is what gatekeeper -demo runs besides gatekeeper itself: the
// simulated vLLM pod's preset (NewPod), the policy built from it (Policy),
// and the text the demo shows (Curls, Banner, Reading, Summary). The command
// wires them: it serves the pod, builds gatekeeper from the policy and runs
// sim/load against it.
package demo

import (
	"log/slog"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim"
	"github.com/gatekeeper-dev/gatekeeper/sim/server"
)

// The demo's simulated pod (issue 5 item 3): an A10G (24 GB) serving
// Llama-3-8B, the smallest preset pair, so a few requests per second fill the
// KV cache and the step buffers' headroom (2.4 GB outside
// gpu_memory_utilization) and the levels, window and queue visibly move. It
// runs in real time (Speed 1): latencies are what that GPU would show.
const (
	GPU         = "A10G"
	Model       = "meta-llama/Meta-Llama-3-8B"
	Upstream    = "vllm-sim"       // the pod's name in the policy
	MaxSeqs     = 64               // the pod's max_num_seqs = the window's maximum
	Speed       = 1.0              // virtual seconds per real second
	RestartTime = 20 * time.Second // an OOM'd pod is back in 20 s, not vLLM's minutes
)

// NewPod builds the simulated pod: GPU serving Model with MaxSeqs and
// RestartTime, generating with seed 1, at speed virtual seconds per real
// second (0 means Speed). It logs engine deaths and restarts to log (nil
// discards) with the attribute upstream=Upstream. The caller serves it
// (Serve or Run). Its errors are sim's and sim/server's, unwrapped.
func NewPod(speed float64, log *slog.Logger) (*server.Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if speed == 0 {
		speed = Speed
	}
	ps, err := PodSettings()
	if err != nil {
		return nil, err
	}
	e, err := sim.New(ps)
	if err != nil {
		return nil, err
	}
	return server.New(e, server.Settings{Speed: speed, Seed: 1, Logger: log.With(slog.String("upstream", Upstream))})
}

// PodSettings are the demo pod's engine settings: GPU serving Model with
// MaxSeqs and RestartTime, everything else vLLM's and PyTorch's defaults
// (gpu_memory_utilization 0.9, no max_split_size, no expandable segments).
// Its errors are sim's, unwrapped.
func PodSettings() (sim.Settings, error) {
	gpu, err := sim.GPUByName(GPU)
	if err != nil {
		return sim.Settings{}, err
	}
	model, err := sim.ModelByName(Model)
	if err != nil {
		return sim.Settings{}, err
	}
	return sim.Settings{GPU: gpu, Model: model, MaxNumSeqs: MaxSeqs, RestartTime: RestartTime}, nil
}
