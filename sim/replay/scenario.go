package replay

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// Scenario is a named workload (vllm-sim replay -scenario NAME): the traffic
// and the pod it runs on, modelled on the mechanism of a kind of run-time
// OOM that real vLLM pods have, with the public reports of it. A scenario
// runs at settings real users run; it is never tuned until it OOMs
// (sim/replay/README.md, "Scenarios", says which do and which cannot).
// multi-turn is the exception: the routing comparison's traffic on a pool
// of pods, its shape from a public benchmark's, not an OOM mechanism.
type Scenario struct {
	// Name is what -scenario takes.
	Name string
	// Summary says in a line what the traffic is.
	Summary string
	// Mechanism says how such a workload can exhaust a pod's memory.
	Mechanism string
	// Reports are the public reports of the mechanism (issue URLs).
	Reports []string
	// apply sets the scenario's trace, engine and client fields on s.
	apply func(s *Settings)
}

// Apply returns s with the scenario's trace, engine and clients; the
// caller's seed, duration and gpu_memory_utilization are kept.
func (sc Scenario) Apply(s Settings) Settings {
	s.Scenario = sc.Name
	if sc.apply != nil {
		sc.apply(&s)
	}
	return s
}

// Scenarios lists every scenario, chat (the default trace) first.
// sim/replay/README.md, "Scenarios", tells each one's reports and results.
func Scenarios() []Scenario {
	return []Scenario{
		{
			Name:    "chat",
			Summary: "the default trace: chat and documents, 50 QPS with bursts to 80, half sampling with top-p",
			Mechanism: "bursts of mixed prompt lengths: the sampler's vocabulary-wide buffers for up to max_num_seqs " +
				"sequences, the caching allocator's stranded free blocks in the headroom outside gpu_memory_utilization",
			Reports: []string{
				"https://github.com/vllm-project/vllm/issues/12529",
				"https://github.com/vllm-project/vllm/issues/15105",
				"https://github.com/vllm-project/vllm/issues/29049",
				"https://github.com/vllm-project/vllm/issues/27466",
			},
		},
		{
			Name: "prompt-logprobs",
			Summary: "chat as in chat, and an evaluation job beside it: about one request a second scoring a " +
				"2 000–8 000-token document with prompt_logprobs and max_tokens 1",
			Mechanism: "prompt_logprobs: the LM head's logits over every prompt token of the step and their " +
				"float32 log-softmax (tokens × vocabulary × 6 bytes), which vLLM's profile never runs",
			Reports: []string{
				"https://github.com/vllm-project/vllm/issues/5907",
				"https://github.com/vllm-project/vllm/issues/10596",
				"https://github.com/vllm-project/vllm/issues/10325",
				"https://github.com/vllm-project/vllm/issues/38830",
			},
			apply: func(s *Settings) {
				s.Trace.Classes = append(chatClasses(0.98), Class{Name: "scoring", Weight: 0.02,
					Prompt: Range{Min: 2000, Max: 8000}, Output: Range{Min: 1, Max: 1}, MaxTokens: 1, PromptLogprobs: true})
			},
		},
		{
			Name: "long-context",
			Summary: "document questions on Llama-3.1-8B's 128k context: prompts of 8 000–32 000 tokens, " +
				"0.5 QPS (three quarters of what the pod serves) with bursts to 0.8",
			Mechanism: "long prompts: prefill activations and attention work that grow with the context, " +
				"which the profile (attention skipped, max_num_batched_tokens tokens) does not cover",
			Reports: []string{
				"https://github.com/vllm-project/vllm/issues/13100",
				"https://github.com/vllm-project/vllm/issues/40420",
				"https://github.com/vllm-project/vllm/issues/15039",
			},
			apply: func(s *Settings) {
				s.Engine.Model, _ = sim.ModelByName("meta-llama/Llama-3.1-8B")
				s.Trace.BaseQPS, s.Trace.BurstQPS = 0.5, 0.8 // the pod serves about 0.65 a second of this mix
				s.Trace.Classes = []Class{{Name: "long", Weight: 1, Prompt: Range{Min: 8000, Max: 32000},
					Output: Range{Min: 100, Max: 400}, MaxTokens: 512}}
			},
		},
		{
			Name: "shared-gpu",
			Summary: "chat as in chat on a GPU it shares: once an hour, at a time drawn from the seed, another " +
				"process takes 92 % of the memory free on the device for 10 minutes",
			Mechanism: "another process on the GPU (a second engine, a job): its growth is the pod's OOM, " +
				"which NVML and the device's free memory see and the pod's allocator does not",
			Reports: []string{
				"https://github.com/vllm-project/vllm-omni/issues/4285",
				"https://github.com/huggingface/trl/issues/2927",
				"https://github.com/unslothai/unsloth/issues/1624",
			},
			apply: func(s *Settings) { s.Engine.Neighbor = hourlyNeighbor(s.Trace) },
		},
		multiTurn(),
	}
}

// chatClasses is the default mix, its weights scaled to total w.
func chatClasses(w float64) []Class {
	cs := DefaultClasses()
	for i := range cs {
		cs[i].Weight *= w
	}
	return cs
}

// hourlyNeighbor is shared-gpu's neighbour: in each hour of the trace, at
// a minute drawn from the seed, it takes 92 % of what the device has free
// (vllm-omni#4285's fault injection) for 10 minutes.
func hourlyNeighbor(ts TraceSettings) sim.Neighbor {
	d := cmp.Or(ts.Duration, 24*time.Hour)
	rng := rand.New(rand.NewPCG(ts.Seed, 0x6e6569676862)) // "neighb"
	var n sim.Neighbor
	for h := time.Duration(0); h < d; h += time.Hour {
		at := h + time.Duration(rng.IntN(50))*time.Minute
		n.Peaks = append(n.Peaks, sim.NeighborPeak{At: at, For: 10 * time.Minute, Share: 0.92})
	}
	return n
}

// ScenarioByName returns the scenario of that name.
func ScenarioByName(name string) (Scenario, error) {
	var names []string
	for _, sc := range Scenarios() {
		if sc.Name == name {
			return sc, nil
		}
		names = append(names, sc.Name)
	}
	return Scenario{}, fmt.Errorf("replay: unknown scenario %q (want one of %s)", name, strings.Join(names, ", "))
}
