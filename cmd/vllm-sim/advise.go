package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim"
	"github.com/gatekeeper-dev/gatekeeper/sim/advise"
	"github.com/gatekeeper-dev/gatekeeper/sim/replay"
)

// adviseOptions are the flags of the advise subcommand.
type adviseOptions struct {
	s    advise.Settings
	json bool
}

const adviseUsage = `Usage: vllm-sim advise [flags]

The capacity advisor: for a model, GPU types, gpu_memory_utilization and max_num_seqs
values and a traffic shape, it replays the traffic (sim/replay) with gatekeeper's
controller in front of each simulated pod, finds for every grid point the fewest pods
(each on one GPU, sharing the traffic evenly) whose SLO attainment meets -slo-target
with at most -max-ooms OOMs a pod, and prints per GPU the point that needs the fewest
pods, then the whole grid. Progress goes to stderr, one line per grid point.
docs/simulation.md ("The capacity advisor") says how to read the table and its limits.

  go run ./cmd/vllm-sim advise                                   # Llama-3-8B, 50 QPS with bursts to 80
  go run ./cmd/vllm-sim advise -steady-qps 100 -burst-qps 150 -gpus A100-80G,H100-80G
  go run ./cmd/vllm-sim advise -model llama-2-13b -prompt 1000-3000 -output 100-400 -json

Flags:`

func parseAdviseFlags(args []string, stderr io.Writer) (*adviseOptions, error) {
	o := &adviseOptions{}
	s := &o.s
	fs := flag.NewFlagSet("vllm-sim advise", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, adviseUsage)
		fs.PrintDefaults()
	}
	model := fs.String("model", "meta-llama/Meta-Llama-3-8B", "model preset (meta-llama/Meta-Llama-3-8B, meta-llama/Llama-3.1-8B, meta-llama/Meta-Llama-3-70B, meta-llama/Llama-2-13b-hf; bf16); the size flags below override its figures")
	params := fs.Int64("params", 0, "the model's parameter count (0: the preset's)")
	layers := fs.Int("layers", 0, "num_hidden_layers (0: the preset's)")
	hidden := fs.Int("hidden", 0, "hidden_size (0: the preset's)")
	inter := fs.Int("intermediate", 0, "intermediate_size (0: the preset's)")
	kvHeads := fs.Int("kv-heads", 0, "num_key_value_heads (0: the preset's)")
	headDim := fs.Int("head-dim", 0, "head_dim (0: the preset's)")
	vocab := fs.Int("vocab", 0, "vocab_size (0: the preset's)")
	maxLen := fs.Int("max-model-len", 0, "context length (0: the preset's); vLLM refuses to start when the KV cache cannot hold one sequence this long")
	gpus := fs.String("gpus", strings.Join(sim.GPUNames(), ","), "comma-separated GPU presets")
	utils := fs.String("gpu-memory-utilization", "0.75,0.8,0.85,0.9", "comma-separated gpu_memory_utilization values, each in (0, 1]")
	seqs := fs.String("max-num-seqs", "0", "comma-separated max_num_seqs values (0: vLLM's server default for the GPU: 1024 on GPUs of 70 GiB and more but the A100, else 256)")
	fs.Float64Var(&s.Traffic.SteadyQPS, "steady-qps", 50, "the pool's steady arrival rate (Poisson), shared evenly by the pods")
	fs.Float64Var(&s.Traffic.BurstQPS, "burst-qps", 80, "the pool's arrival rate during bursts (equal to -steady-qps: no bursts)")
	fs.DurationVar(&s.Traffic.BurstEvery, "burst-every", 0, "time between burst starts; each burst closes its period (0: 30m or the horizon, whichever is shorter)")
	fs.DurationVar(&s.Traffic.BurstLength, "burst-length", 0, "length of a burst (0: 5m or -burst-every, whichever is shorter)")
	prompt := fs.String("prompt", "", "prompt tokens, lo-hi, drawn uniformly; with -output, one class of requests replaces the replay's mix (85 % chats of 50-250 tokens, 15 % documents of 1000-2000)")
	output := fs.String("output", "", "output tokens, lo-hi (with -prompt); max_tokens is hi")
	hours := fs.Float64("hours", 0.25, "virtual hours each replay lasts")
	fs.Uint64Var(&s.Seed, "seed", 101, "seed of the trace (the replay's held-out seeds are 101-110)")
	fs.Float64Var(&s.SLOTarget, "slo-target", 0.99, "the SLO attainment a pod count must reach, (0, 1]: the share of requests answered within 2 s to the first token (10 s for long prompts) and 100 ms a token")
	fs.Int64Var(&s.MaxOOMs, "max-ooms", 0, "the most OOMs a pod may have in the horizon and still count")
	fs.IntVar(&s.MaxPods, "max-pods", 64, "the largest pod count tried")
	fs.IntVar(&s.Parallel, "parallel", 0, "grid points at once (0: one per CPU)")
	fs.BoolVar(&o.json, "json", false, "print the report as one JSON object instead of the table")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("advise: unexpected arguments %q", fs.Args())
	}
	m, err := sim.ModelByName(*model)
	if err != nil {
		return nil, err
	}
	custom := false
	for _, f := range []struct {
		name string
		v    int64
		to   func(int64)
	}{
		{"params", *params, func(v int64) { m.Params = v }},
		{"layers", int64(*layers), func(v int64) { m.Layers = int(v) }},
		{"hidden", int64(*hidden), func(v int64) { m.Hidden = int(v) }},
		{"intermediate", int64(*inter), func(v int64) { m.Intermediate = int(v) }},
		{"kv-heads", int64(*kvHeads), func(v int64) { m.KVHeads = int(v) }},
		{"head-dim", int64(*headDim), func(v int64) { m.HeadDim = int(v) }},
		{"vocab", int64(*vocab), func(v int64) { m.Vocab = int(v) }},
		{"max-model-len", int64(*maxLen), func(v int64) { m.MaxModelLen = int(v) }},
	} {
		if f.v < 0 {
			return nil, fmt.Errorf("advise: -%s = %d, want ≥ 0", f.name, f.v)
		}
		if f.v > 0 {
			f.to(f.v)
			custom = custom || f.name != "max-model-len"
		}
	}
	if custom {
		m.Name = "custom (" + m.Name + " resized)"
	}
	s.Model = m
	for _, name := range strings.Split(*gpus, ",") {
		g, err := sim.GPUByName(strings.TrimSpace(name))
		if err != nil || strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("advise: -gpus: %q: want presets among %s", name, strings.Join(sim.GPUNames(), ", "))
		}
		s.GPUs = append(s.GPUs, g)
	}
	for _, v := range strings.Split(*utils, ",") {
		u, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(u > 0 && u <= 1) {
			return nil, fmt.Errorf("advise: -gpu-memory-utilization: %q is not in (0, 1]", v)
		}
		s.Utilizations = append(s.Utilizations, u)
	}
	for _, v := range strings.Split(*seqs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("advise: -max-num-seqs: %q is not a count ≥ 0", v)
		}
		s.MaxNumSeqs = append(s.MaxNumSeqs, n)
	}
	if (*prompt == "") != (*output == "") {
		return nil, fmt.Errorf("advise: -prompt and -output go together")
	}
	if *prompt != "" {
		p, err1 := parseRange(*prompt)
		out, err2 := parseRange(*output)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("advise: -prompt %q, -output %q: want lo-hi token counts, 1 ≤ lo ≤ hi", *prompt, *output)
		}
		// The replay's SLO and clients go by the class's name: a short
		// prompt is a chat (2 s to the first token), a long one a document
		// (10 s), split where the replay's mix splits them.
		name := "short"
		if p.Max >= 1000 {
			name = "long"
		}
		s.Traffic.Classes = []replay.Class{{Name: name, Weight: 1, Prompt: p, Output: out, MaxTokens: out.Max}}
	}
	if !(*hours > 0) {
		return nil, fmt.Errorf("advise: -hours = %v, want > 0", *hours)
	}
	s.Horizon = time.Duration(*hours * float64(time.Hour))
	if s.Parallel < 0 {
		return nil, fmt.Errorf("advise: -parallel = %d, want ≥ 0 (0: one per CPU)", s.Parallel)
	}
	if s.MaxPods < 1 {
		return nil, fmt.Errorf("advise: -max-pods = %d, want ≥ 1", s.MaxPods)
	}
	return o, nil
}

// parseRange reads lo-hi (or one number).
func parseRange(v string) (replay.Range, error) {
	lo, hi, isRange := strings.Cut(strings.TrimSpace(v), "-")
	a, err := strconv.Atoi(lo)
	b := a
	if err == nil && isRange {
		b, err = strconv.Atoi(hi)
	}
	if err != nil || a < 1 || b < a {
		return replay.Range{}, fmt.Errorf("%q is not lo-hi", v)
	}
	return replay.Range{Min: a, Max: b}, nil
}

// runAdvise runs the advisor and prints its table (or JSON) on stdout,
// its progress on stderr.
func runAdvise(args []string, stdout, stderr io.Writer) error {
	o, err := parseAdviseFlags(args, stderr)
	if err != nil {
		return err
	}
	o.s.Progress = func(p advise.Progress) {
		pt := p.Point
		what := fmt.Sprintf("%d pods (%d replays)", pt.Pods, pt.Runs)
		switch {
		case !pt.Fits:
			what = "does not fit"
		case !pt.Met:
			what = fmt.Sprintf("more than %d pods (%d replays)", o.s.MaxPods, pt.Runs)
		}
		fmt.Fprintf(stderr, "advise: %d/%d %s gpu_memory_utilization %.2f max_num_seqs %d: %s; %s elapsed, ETA %s\n",
			p.Done, p.Total, pt.GPU, pt.GPUMemoryUtilization, pt.MaxNumSeqs, what, p.Elapsed.Round(100*time.Millisecond), p.ETA.Round(time.Second))
	}
	rep, err := advise.Run(o.s)
	if err != nil {
		return err
	}
	if o.json {
		return advise.WriteJSON(stdout, rep)
	}
	return advise.WriteTable(stdout, rep)
}
