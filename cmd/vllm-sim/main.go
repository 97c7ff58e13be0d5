// Command vllm-sim serves a simulated vLLM (package sim) over HTTP in real or
// scaled time: /v1/completions, /v1/chat/completions (streaming and not),
// /v1/models, /health, /metrics, /v1/internal/metrics (memory_blocks) and
// POST /v1/internal/empty_cache. Its GPU memory fragments like PyTorch's
// caching allocator and an out-of-memory error kills the engine for a
// restart time, so gatekeeper can be tried without a GPU.
//
//	go run ./cmd/vllm-sim -listen 127.0.0.1:8000 -speed 1
//
// The replay subcommand runs a traffic trace in virtual time against the same
// engine under three policies and prints a table (sim/replay/README.md):
//
//	go run ./cmd/vllm-sim replay -hours 24
//
// The advise subcommand is the capacity advisor: for a model, GPU types and a
// traffic shape it runs the replay grid with gatekeeper in front of each pod
// and prints, per GPU, the pods needed, the headroom and the figures behind
// them (docs/simulation.md):
//
//	go run ./cmd/vllm-sim advise -steady-qps 50 -burst-qps 80
//
// Run with -h (or replay -h, advise -h) for every flag; sim/README.md explains each parameter.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim"
	"github.com/gatekeeper-dev/gatekeeper/sim/server"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "vllm-sim:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	listen    string
	gpu       string
	model     string
	logLevel  string
	engine    sim.Settings
	server    server.Settings
	nonTorch  int64
	context   int64
	graphs    int64
	sampler   string
	other     int64
	maxSplit  int64
	restart   time.Duration
	speed     float64
	tick      time.Duration
	seed      uint64
	gpuID     string
	served    string
	maxTokens int
	chars     int
	full      bool
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("vllm-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: vllm-sim [flags]\n\nA simulated vLLM server whose GPU memory fragments (see sim/README.md).\nFlags (vLLM's names where vLLM has one; zero selects the default):")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8000", "`address` to serve HTTP on")
	engineFlags(fs, o, "A100-80G")
	fs.Float64Var(&o.speed, "speed", 1, "virtual seconds per real second")
	fs.DurationVar(&o.tick, "tick", 5*time.Millisecond, "real-time interval at which the engine is advanced")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the generated text and output lengths")
	fs.StringVar(&o.gpuID, "gpu-id", "0", "gpu_id reported by the memory_blocks endpoint and DCGM-style gauges")
	fs.IntVar(&o.maxTokens, "default-max-tokens", 256, "output budget of requests without max_tokens")
	fs.IntVar(&o.chars, "chars-per-token", 4, "characters per prompt token when estimating prompt length")
	fs.BoolVar(&o.full, "full-output", false, "every request generates max_tokens (as with ignore_eos); otherwise a seeded length in [1, max_tokens]")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := o.resolveEngine(); err != nil {
		return nil, err
	}
	o.server = server.Settings{ModelName: o.served, GPUID: o.gpuID, Speed: o.speed, Tick: o.tick, Seed: o.seed,
		DefaultMaxTokens: o.maxTokens, CharsPerToken: o.chars, FullOutput: o.full}
	return o, nil
}

// engineFlags declares the flags of the simulated engine.
func engineFlags(fs *flag.FlagSet, o *options, gpu string) {
	es := &o.engine
	fs.StringVar(&o.gpu, "gpu", gpu, "GPU preset: A10G, A100-40G, A100-80G, H100-80G or H200")
	fs.StringVar(&o.model, "model", "meta-llama/Meta-Llama-3-8B", "model preset: meta-llama/Meta-Llama-3-8B, meta-llama/Meta-Llama-3-70B or meta-llama/Llama-2-13b-hf (bf16)")
	fs.IntVar(&es.TensorParallel, "tensor-parallel-size", 1, "GPUs the model is split over (vLLM's tensor_parallel_size); the engine simulates one of them")
	fs.StringVar(&o.served, "served-model-name", "", "model name served and checked in requests (default: the model preset's name)")
	fs.Float64Var(&es.GPUMemoryUtilization, "gpu-memory-utilization", 0.9, "fraction of GPU memory for weights, activations and KV cache, (0, 1]")
	fs.IntVar(&es.MaxNumSeqs, "max-num-seqs", 0, "most sequences in one batch (0: vLLM's server default for the GPU: 1024 on GPUs of 70 GiB and more but the A100, else 256)")
	fs.IntVar(&es.MaxNumBatchedTokens, "max-num-batched-tokens", 0, "token budget of one step and size of the profiling pass (0: vLLM's server default for the GPU: 8192 or 2048, as -max-num-seqs)")
	fs.IntVar(&es.BlockSize, "block-size", 16, "KV cache block size in tokens")
	fs.IntVar(&es.MaxModelLen, "max-model-len", 0, "context length cap (0: the model's)")
	fs.IntVar(&es.CUDAGraphMaxTokens, "cuda-graph-max-tokens", 0, "largest step replayed as a CUDA graph, its activations outside the cache (0: vLLM's min(2 × max_num_seqs, 512, max_num_batched_tokens))")
	fs.BoolVar(&es.EnforceEager, "enforce-eager", false, "no CUDA graphs: every step's forward pass allocates from the caching allocator (vLLM's --enforce-eager)")
	fs.StringVar(&o.sampler, "sampler", "flashinfer", "top-k/top-p sampler: flashinfer (vLLM's CUDA default since v0.21) or sort (PyTorch's sort, the default of late 2025)")
	fs.IntVar(&es.NumGPUBlocksOverride, "num-gpu-blocks-override", 0, "KV blocks instead of the computed number (0: computed)")
	fs.Float64Var(&es.PrefillEfficiency, "prefill-efficiency", 0.5, "fraction of peak FLOPS a prefill reaches, (0, 1]")
	fs.Int64Var(&o.context, "cuda-context-mib", 400, "MiB of CUDA context, taken before vLLM's first snapshot (outside gpu_memory_utilization)")
	fs.Int64Var(&o.nonTorch, "non-torch-mib", 340, "MiB outside PyTorch that vLLM measures while it profiles (cuBLAS, attention backends, NCCL)")
	fs.Int64Var(&o.graphs, "cuda-graph-mib", 450, "MiB of the CUDA graphs' pool, estimated and subtracted from the KV cache as vLLM ≥ 0.21 does")
	fs.Int64Var(&o.other, "other-process-mib", 0, "MiB held by other processes on the GPU")
	fs.Int64Var(&o.maxSplit, "max-split-size-mb", 0, "PyTorch max_split_size_mb: cached blocks this large are never split (0: unlimited)")
	fs.BoolVar(&es.ExpandableSegments, "expandable-segments", false, "PyTorch expandable_segments:True: one growing segment per pool (what-if)")
	fs.BoolVar(&es.MidStepReadings, "mid-step-readings", false, "the allocator endpoint, read while a step runs, reports the allocator mid-step (its buffers live), as an exporter thread does")
	fs.DurationVar(&o.restart, "restart-time", 90*time.Second, "virtual time the server is gone after an out-of-memory error")
}

// resolveEngine turns the engine flags into sim.Settings.
func (o *options) resolveEngine() error {
	es := &o.engine
	var err error
	if es.GPU, err = sim.GPUByName(o.gpu); err != nil {
		return err
	}
	if es.Model, err = sim.ModelByName(o.model); err != nil {
		return err
	}
	if o.nonTorch <= 0 || o.context <= 0 || o.graphs <= 0 || o.other < 0 || o.maxSplit < 0 {
		return errors.New("-non-torch-mib, -cuda-context-mib and -cuda-graph-mib must be > 0, -other-process-mib and -max-split-size-mb >= 0")
	}
	if es.Sampler, err = sim.ParseSampler(o.sampler); err != nil {
		return err
	}
	es.NonTorchBytes, es.OtherProcessBytes, es.MaxSplitSize = o.nonTorch<<20, o.other<<20, o.maxSplit<<20
	es.CUDAContextBytes, es.CUDAGraphBytes = o.context<<20, o.graphs<<20
	es.RestartTime = o.restart
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "replay" {
		return runReplay(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "advise" {
		return runAdvise(args[1:], stdout, stderr)
	}
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	e, err := sim.New(o.engine)
	if err != nil {
		return err
	}
	o.server.Logger = logger
	srv, err := server.New(e, o.server)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	p := e.Plan()
	logger.LogAttrs(ctx, slog.LevelInfo, "vllm-sim serving",
		slog.String("listen", ln.Addr().String()), slog.String("model", e.Settings().Model.Name),
		slog.String("gpu", e.Settings().GPU.Name), slog.Int("num_gpu_blocks", p.NumGPUBlocks),
		slog.Int64("activation_peak_bytes", p.ActivationPeakBytes),
		slog.Int64("activation_budget_bytes", p.ActivationBudgetBytes), slog.Float64("speed", o.speed))
	return srv.Serve(ctx, ln)
}
