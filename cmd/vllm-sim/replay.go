package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/sim"
	"github.com/gatekeeper-dev/gatekeeper/sim/replay"
)

// replayOptions are the flags of the replay subcommand.
type replayOptions struct {
	options
	pool       poolOptions
	hours      string
	seeds      string
	policies   string
	parallel   int
	trace      string
	longPrompt int
	out        string
	policy     string
	json       bool
	jsonOut    string
	ttftShort  time.Duration
	ttftLong   time.Duration
	scenario   string
	list       bool
	patient    bool
	visited    map[string]bool // the flags given on the command line
	base       replay.Settings
}

func parseReplayFlags(args []string, stderr io.Writer) (*replayOptions, error) {
	o := &replayOptions{}
	fs := flag.NewFlagSet("vllm-sim replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: vllm-sim replay [flags]\n\nReplays a synthetic trace in virtual time under each policy on the same engine and seed,\nand prints one table (sim/replay/README.md). Flags:")
		fs.PrintDefaults()
	}
	engineFlags(fs, &o.options, "H100-80G")
	ts := &o.base.Trace
	fs.StringVar(&o.hours, "hours", "24", "comma-separated horizons in virtual hours, e.g. 24,72,168")
	fs.StringVar(&o.policies, "policies", strings.Join(policyNames(), ","), "comma-separated policies to run")
	fs.StringVar(&o.scenario, "scenario", "chat", "the workload (-list-scenarios names them; sim/replay/README.md describes them)")
	fs.BoolVar(&o.list, "list-scenarios", false, "print the scenarios' names, one a line, and exit")
	fs.BoolVar(&o.patient, "patient-clients", false, "what-if: clients that neither retry nor give up (before issue 34)")
	fs.IntVar(&o.parallel, "parallel", 0, "runs at once; 0: all of them, which on few cores finishes first (no core idles while one long run ends)")
	fs.StringVar(&o.trace, "trace", "", "CSV `file` of arrival_seconds,prompt_tokens,output_tokens[,max_tokens] replacing the synthetic trace (-hours then caps it; 0 = whole file)")
	fs.StringVar(&o.out, "out", "", "`dir`ectory for each run's time series (CSV, one row per 10 virtual seconds), chart (SVG) and OOM timelines (-ooms.txt: the failed step and the 20 s before each OOM)")
	fs.IntVar(&o.longPrompt, "long-prompt", 1000, "with -trace: prompts of at least this many tokens count as long")
	fs.Uint64Var(&ts.Seed, "seed", 1, "seed of the trace")
	fs.StringVar(&o.seeds, "seeds", "", "a seed sweep: seeds and ranges, e.g. 1-10 or 1,3,7-9; every run once per seed, printed as one Markdown row per seed (replaces -seed)")
	fs.Float64Var(&ts.BaseQPS, "base-qps", 50, "steady arrival rate")
	fs.Float64Var(&ts.BurstQPS, "burst-qps", 80, "arrival rate during bursts")
	fs.DurationVar(&ts.BurstEvery, "burst-every", 30*time.Minute, "time between burst starts")
	fs.DurationVar(&ts.BurstLength, "burst-length", 5*time.Minute, "length of a burst")
	fs.Float64Var(&ts.TopPFraction, "top-p-fraction", 0.5, "share of requests sampling with top-p")
	fs.Float64Var(&ts.PromptLogprobsFraction, "prompt-logprobs-fraction", 0, "share of requests asking for prompt_logprobs (logits over the whole prompt: prompt × vocabulary × 6 bytes per step)")
	fs.Float64Var(&ts.NFraction, "n-fraction", 0, "share of requests asking for -n sequences (best-of-n, RL rollouts; the engine runs each as its own sequence)")
	fs.IntVar(&ts.N, "n", replay.DefaultN, "the n of the requests -n-fraction picks")
	fs.Float64Var(&o.base.Limiter.QPS, "qps-limit", 80, "fast breaker rate (qps-only and gatekeeper)")
	fs.IntVar(&o.base.Limiter.Burst, "qps-burst", 40, "fast breaker bucket size")
	fs.DurationVar(&o.base.MaxWait, "max-wait", 30*time.Second, "longest wait in gatekeeper's queue")
	fs.BoolVar(&o.base.EmptyCacheOnDegraded, "empty-cache-on-degraded", false, "gatekeeper fires the allocator's empty_cache hook when the level rises")
	fs.IntVar(&o.base.Slow.Window.MaxInflight, "max-inflight", 0, "upstreams[].max_inflight: the window's top (0: the pod's max_num_seqs, as config.yaml tells the operator to set it)")
	fs.Float64Var(&o.base.Memory.Share, "memory-share", 0, "batch.memory_share: the share of the pod's free memory memory admission lets in-flight estimates take (0: the policy's)")
	fs.DurationVar(&o.base.Slow.Window.FailureHold, "failure-hold", 0, "batch.failure_hold: how long the window's ceiling after a failure holds (0: the policy's, for as long as gatekeeper runs)")
	fs.BoolVar(&o.base.NoFailureCeiling, "no-failure-ceiling", false, "what-if: gatekeeper without the window ceiling that follows a pod's failure under load (before issue 23)")
	fs.BoolVar(&o.base.ClientDeadlines, "client-deadlines", false, "every client sends its own time-to-first-token deadline (its class's -slo-ttft-*) in the policy's queue.deadline_header")
	fs.DurationVar(&o.base.TTFTDeadline, "ttft-deadline", 0, "gatekeeper's queue.ttft_deadline, when given (0: none); else the policy's")
	fs.BoolVar(&o.json, "json", false, "print one JSON object per run (a line each) instead of the table")
	fs.StringVar(&o.jsonOut, "json-out", "", "also write one JSON object per run (a line each) to `file`")
	fs.DurationVar(&o.ttftShort, "slo-ttft-short", 2*time.Second, "SLO goodput: time-to-first-token deadline of short requests, from arrival")
	fs.DurationVar(&o.ttftLong, "slo-ttft-long", 10*time.Second, "SLO goodput: time-to-first-token deadline of long requests (and any other class)")
	fs.DurationVar(&o.base.SLO.TPOT, "slo-tpot", 100*time.Millisecond, "SLO goodput: deadline on the mean time per output token after the first")
	poolFlags(fs, &o.pool)
	fs.StringVar(&o.policy, "policy", "", "gatekeeper policy `file` (config.yaml) for the qps-only and gatekeeper runs; -qps-limit, -qps-burst, -max-wait and -empty-cache-on-degraded, when given, override it")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.visited = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.visited[f.Name] = true })
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "ttft-deadline" && o.base.TTFTDeadline == 0 {
			o.base.TTFTDeadline = -1 // given as 0: none (the replay's 0 is the policy's default)
		}
	})
	if o.policy != "" {
		c, err := config.LoadFile(o.policy)
		if err != nil {
			return nil, err
		}
		flags := o.base
		o.base = replay.WithPolicy(c, o.base)
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "qps-limit":
				o.base.Limiter.QPS, o.base.LimiterOff = flags.Limiter.QPS, false
			case "qps-burst":
				o.base.Limiter.Burst = flags.Limiter.Burst
			case "max-wait":
				o.base.MaxWait = flags.MaxWait
			case "ttft-deadline":
				o.base.TTFTDeadline = flags.TTFTDeadline
			case "empty-cache-on-degraded":
				o.base.EmptyCacheOnDegraded = flags.EmptyCacheOnDegraded
			case "max-inflight":
				o.base.Slow.Window.MaxInflight = flags.Slow.Window.MaxInflight
			case "memory-share":
				o.base.Memory.Share = flags.Memory.Share
			case "failure-hold":
				o.base.Slow.Window.FailureHold = flags.Slow.Window.FailureHold
			}
		})
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.patient {
		o.base.Clients = map[string]replay.Client{}
	}
	if o.ttftShort <= 0 || o.ttftLong <= 0 || o.base.SLO.TPOT <= 0 {
		return nil, fmt.Errorf("-slo-ttft-short, -slo-ttft-long and -slo-tpot must be positive")
	}
	o.base.SLO.TTFT = map[string]time.Duration{"short": o.ttftShort, "long": o.ttftLong}
	o.base.SLO.DefaultTTFT = o.ttftLong
	o.pool.scaleSet = o.visited["autoscale"]
	if err := o.pool.parse(); err != nil {
		return nil, err
	}
	if o.parallel < 0 {
		return nil, fmt.Errorf("-parallel = %d, want >= 0 (0: every run at once)", o.parallel)
	}
	if err := o.resolveEngine(); err != nil {
		return nil, err
	}
	o.base.Engine = o.engine
	return o, nil
}

// policyNames are every policy's name, in the tables' order.
func policyNames() []string {
	var names []string
	for _, p := range replay.Policies() {
		names = append(names, p.String())
	}
	return names
}

// runReplay runs every horizon × policy, -parallel at a time, and prints the table.
func runReplay(args []string, stdout, stderr io.Writer) error {
	o, err := parseReplayFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.list {
		for _, sc := range replay.Scenarios() {
			fmt.Fprintln(stdout, sc.Name)
		}
		return nil
	}
	sc, err := replay.ScenarioByName(o.scenario)
	if err != nil {
		return err
	}
	seeds := []uint64{o.base.Trace.Seed}
	if o.seeds != "" {
		if seeds, err = parseSeeds(o.seeds); err != nil {
			return err
		}
	}
	var runs []replay.Settings
	for _, h := range strings.Split(o.hours, ",") {
		hours, err := strconv.ParseFloat(strings.TrimSpace(h), 64)
		if err != nil || hours < 0 || (hours == 0 && o.trace == "") {
			return fmt.Errorf("-hours: %q is not a positive number", h)
		}
		for _, seed := range seeds {
			for _, name := range strings.Split(o.policies, ",") {
				p, err := replay.ParsePolicy(strings.TrimSpace(name))
				if err != nil {
					return err
				}
				s := o.withScenario(sc, time.Duration(hours*float64(time.Hour)), seed)
				s.Policy = p
				if o.out != "" {
					s.SeriesEvery = 10 * time.Second
				}
				if o.trace != "" {
					f, err := os.Open(o.trace)
					if err != nil {
						return err
					}
					defer f.Close()
					s.Source = replay.NewCSVTrace(bufio.NewReader(f), o.longPrompt)
				}
				rs, err := o.pool.withRoutings(s)
				if err != nil {
					return err
				}
				runs = append(runs, rs...)
			}
		}
	}
	results := make([]replay.Result, len(runs))
	errs := make([]error, len(runs))
	sem := make(chan struct{}, cmp.Or(o.parallel, len(runs)))
	var wg sync.WaitGroup
	for i, s := range runs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i], errs[i] = replay.Run(s)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	if o.out != "" {
		if err := writeSeries(o.out, results, len(seeds) > 1); err != nil {
			return err
		}
	}
	if o.jsonOut != "" {
		if err := writeRecords(o.jsonOut, results); err != nil {
			return err
		}
	}
	if o.json {
		return encodeRecords(stdout, results)
	}
	if o.pool.scalingTable() {
		return replay.WriteScaling(stdout, results)
	}
	if o.pool.routingTable() {
		return replay.WriteRouting(stdout, results)
	}
	if len(seeds) > 1 {
		return replay.WriteSweep(stdout, results)
	}
	first := runs[0]
	e, err := sim.New(first.Engine) // the scenario's engine with its defaults filled in
	if err != nil {
		return err
	}
	es, ts := e.Settings(), first.Trace
	traffic := fmt.Sprintf("seed %d; %g QPS with bursts to %g (%v every %v)", ts.Seed, ts.BaseQPS, ts.BurstQPS, ts.BurstLength, ts.BurstEvery)
	if o.trace != "" {
		traffic = "trace " + o.trace
	}
	pol := "policy: config.yaml defaults"
	if o.policy != "" {
		pol = "policy " + o.policy
	}
	fmt.Fprintf(stdout, "vllm-sim replay, scenario %s: %s on %s, gpu_memory_utilization %.2f, max_num_seqs %d, max_num_batched_tokens %d, %s; %s\n\n",
		sc.Name, es.Model.Name, es.GPU.Name, es.GPUMemoryUtilization, es.MaxNumSeqs, es.MaxNumBatchedTokens, traffic, pol)
	return replay.WriteTable(stdout, results)
}

// writeSeries writes DIR/<hours>h-<policy>.csv and .svg for every run
// (<hours>h-seed<N>-<policy> in a seed sweep).
func writeSeries(dir string, results []replay.Result, bySeed bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, r := range results {
		base := fmt.Sprintf("%.4gh-%s", r.Horizon.Hours(), r.Policy)
		if bySeed {
			base = fmt.Sprintf("%.4gh-seed%d-%s", r.Horizon.Hours(), r.Seed, r.Policy)
		}
		name := filepath.Join(dir, base)
		for _, f := range []struct {
			ext   string
			write func(io.Writer) error
		}{
			{".csv", func(w io.Writer) error { return replay.WriteSeriesCSV(w, r.Series) }},
			{".svg", func(w io.Writer) error {
				return replay.WriteSeriesSVG(w, fmt.Sprintf("%s, %gh", r.Policy, r.Horizon.Hours()), r.Series)
			}},
			{"-ooms.txt", func(w io.Writer) error { return replay.WriteTimelines(w, classNames(r), r.OOMTimelines) }},
		} {
			fh, err := os.Create(name + f.ext)
			if err != nil {
				return err
			}
			bw := bufio.NewWriter(fh)
			err = f.write(bw)
			if ferr := bw.Flush(); err == nil {
				err = ferr
			}
			if cerr := fh.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// parseSeeds reads a -seeds list: comma-separated seeds and ranges (1-10),
// each seed once, in the order given.
func parseSeeds(list string) ([]uint64, error) {
	var out []uint64
	seen := map[uint64]bool{}
	for _, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(lo, 10, 64)
		b := a
		if err == nil && isRange {
			b, err = strconv.ParseUint(hi, 10, 64)
		}
		if err != nil || b < a || b-a >= 10000 {
			return nil, fmt.Errorf("-seeds: %q is not a seed or a range lo-hi (lo ≤ hi, at most 10000 seeds)", part)
		}
		for x := a; ; x++ {
			if !seen[x] {
				seen[x] = true
				out = append(out, x)
			}
			if x == b {
				break
			}
		}
	}
	return out, nil
}

// classNames are a run's trace classes, in the order of its per-class counts.
func classNames(r replay.Result) []string {
	names := make([]string, len(r.Classes))
	for i, c := range r.Classes {
		names[i] = c.Name
	}
	return names
}

// encodeRecords writes one JSON object per run, a line each.
func encodeRecords(w io.Writer, results []replay.Result) error {
	enc := json.NewEncoder(w)
	for _, r := range results {
		if err := enc.Encode(r.Record()); err != nil {
			return err
		}
	}
	return nil
}

// writeRecords writes encodeRecords' lines to the file name.
func writeRecords(name string, results []replay.Result) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	err = encodeRecords(f, results)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
