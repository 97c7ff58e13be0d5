package sim

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Settings configures an Engine. The zero value selects the defaults, which
// README.md in this folder justifies one by one. They follow vLLM's V1
// engine as of v0.21 and later (the "vLLM" column of README.md's table).
type Settings struct {
	// GPU is the device. Zero means the A100-80G preset.
	GPU GPU
	// Model is the served model. Zero means the Llama-3-8B bf16 preset.
	Model Model
	// GPUMemoryUtilization is vLLM's gpu_memory_utilization, the fraction of
	// the device's total memory the engine plans for (weights, activations,
	// non-torch memory, CUDA graphs, KV cache). 0 means 0.9 (vLLM's default
	// until v0.21, which raised it to 0.92 when it began to count the CUDA
	// graphs); valid range (0, 1].
	GPUMemoryUtilization float64
	// MaxNumSeqs is vLLM's max_num_seqs. 0 means the OpenAI server's default
	// for the GPU: 1024 on GPUs of at least 70 GiB other than the A100, 256
	// on the others (vllm/engine/arg_utils.py, _set_default_args).
	MaxNumSeqs int
	// MaxNumBatchedTokens is vLLM's max_num_batched_tokens, the token budget
	// of one step and the size of the profiling pass. 0 means the OpenAI
	// server's default for the GPU: 8192 on GPUs of at least 70 GiB other
	// than the A100, 2048 on the others.
	MaxNumBatchedTokens int
	// BlockSize is the KV cache block in tokens. 0 means 16 (vLLM's default).
	BlockSize int
	// MaxModelLen caps prompt + output tokens. 0 means the model's context length.
	MaxModelLen int
	// CUDAContextBytes is the CUDA context and the kernels it loads, taken
	// when the process first uses the GPU, before vLLM's first memory
	// snapshot: vLLM does not count it, so it lives in the headroom outside
	// gpu_memory_utilization. 0 means 400 MiB ("around 400MB if CUDA >=
	// 11.7 is used and lazy module loading enabled", pytorch/pytorch#109888).
	// Negative is invalid.
	CUDAContextBytes int64
	// NonTorchBytes is the memory outside PyTorch's allocator that appears
	// while vLLM profiles (cuBLAS workspaces, attention backends' buffers,
	// NCCL with tensor parallelism); vLLM measures it and subtracts it from
	// the KV cache. 0 means 340 MiB (a vLLM log: "non_torch_memory takes
	// 0.33GiB", vllm#14452). Negative is invalid.
	NonTorchBytes int64
	// CUDAGraphBytes is the CUDA graphs' private memory pool. Since v0.21
	// vLLM estimates it before it sizes the KV cache and subtracts it
	// (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, on by default); the
	// simulator takes the estimate as exact. 0 means 450 MiB ("Estimated
	// CUDA graph memory: 0.44 GiB total" for 51 piecewise graphs up to 512
	// tokens, vllm#48214); none with EnforceEager. Negative is invalid.
	CUDAGraphBytes int64
	// OtherProcessBytes is memory held by other processes on the same GPU,
	// taken after the engine sized its KV cache (the "several models on one
	// GPU" case). 0 means none. Neighbor is the same with a time course.
	OtherProcessBytes int64
	// Neighbor, if its Peaks are set, is another process on the GPU whose
	// memory grows and shrinks (neighbor.go).
	Neighbor Neighbor
	// PrefillEfficiency is the fraction of peak FLOPS a prefill reaches.
	// 0 means 0.5 (SIM-FACTS: 40–60 %); valid range (0, 1].
	PrefillEfficiency float64
	// MaxSplitSize is PyTorch's max_split_size_mb in bytes. 0 means unlimited.
	MaxSplitSize int64
	// ExpandableSegments is PyTorch's expandable_segments:True (a what-if;
	// PyTorch's default is false).
	ExpandableSegments bool
	// EnforceEager is vLLM's --enforce-eager: no CUDA graphs, so every
	// step's forward pass allocates its activations from the caching
	// allocator. Off (vLLM's default), a step of at most CUDAGraphMaxTokens
	// tokens replays a captured graph whose activations come from the
	// graphs' private pool (CUDAGraphBytes), and only larger steps, the LM
	// head and the sampler allocate from the cache.
	EnforceEager bool
	// CUDAGraphMaxTokens is the largest step captured as a CUDA graph. 0
	// means vLLM's default, min(2 × max_num_seqs, 512, max_num_batched_tokens)
	// (VllmConfig._set_cudagraph_sizes). Negative is invalid.
	CUDAGraphMaxTokens int
	// Sampler is the top-k/top-p implementation. 0 (SamplerFlashInfer) is
	// vLLM's CUDA default since v0.21; SamplerSort is the PyTorch sort of
	// the releases between October 2025 and February 2026, a what-if.
	Sampler Sampler
	// NumGPUBlocksOverride replaces the computed number of KV blocks, like
	// vLLM's num_gpu_blocks_override (tests, what-ifs). 0 means computed.
	NumGPUBlocksOverride int
	// RestartTime is how long the server is gone after an OOM (process exit,
	// pod restart, weight load). 0 means 90s.
	RestartTime time.Duration
	// TensorParallel is vLLM's tensor_parallel_size: the model is split over
	// this many GPUs of the preset, and the engine simulates one of them
	// (they are symmetric): 1/TensorParallel of the weights and of the KV
	// heads, the attention and MLP temporaries split likewise, the hidden
	// states whole, and, since vLLM V1 all-gathers the logits to every
	// rank, the whole sampler. A step adds two all-reduces of its hidden
	// states per layer over GPU.LinkBytesPerSec (bandwidth only, no
	// latency: an optimistic step time). 0 means 1. The model's KV heads,
	// hidden size and intermediate size must divide by it.
	TensorParallel int
	// MidStepReadings makes MemoryBlocks, read while a step runs (a step
	// that began before the last Advance's target ends after it), report
	// the allocator in the middle of that step, its buffers live, as an
	// exporter thread inside the serving process reads it. Off, every
	// reading sees the allocator between steps.
	MidStepReadings bool
}

// largeGPU reports whether vLLM's OpenAI server gives the GPU its larger
// defaults: at least 70 GiB and not an A100.
func (g GPU) largeGPU() bool { return g.MemoryBytes >= 70*gib && !strings.HasPrefix(g.Name, "A100") }

func (s Settings) withDefaults() Settings {
	if s.GPU == (GPU{}) {
		s.GPU, _ = GPUByName("")
	}
	if s.Model == (Model{}) {
		s.Model, _ = ModelByName("")
	}
	if s.GPUMemoryUtilization == 0 {
		s.GPUMemoryUtilization = 0.9
	}
	if s.MaxNumSeqs == 0 {
		s.MaxNumSeqs = 256
		if s.GPU.largeGPU() {
			s.MaxNumSeqs = 1024
		}
	}
	if s.MaxNumBatchedTokens == 0 {
		s.MaxNumBatchedTokens = 2048
		if s.GPU.largeGPU() {
			s.MaxNumBatchedTokens = 8192
		}
	}
	if s.BlockSize == 0 {
		s.BlockSize = 16
	}
	if s.MaxModelLen == 0 {
		s.MaxModelLen = s.Model.MaxModelLen
	}
	if s.CUDAContextBytes == 0 {
		s.CUDAContextBytes = 400 * mib
	}
	if s.NonTorchBytes == 0 {
		s.NonTorchBytes = 340 * mib
	}
	if s.EnforceEager {
		s.CUDAGraphBytes, s.CUDAGraphMaxTokens = 0, 0
	} else {
		if s.CUDAGraphBytes == 0 {
			s.CUDAGraphBytes = 450 * mib
		}
		if s.CUDAGraphMaxTokens == 0 {
			s.CUDAGraphMaxTokens = min(2*s.MaxNumSeqs, 512, s.MaxNumBatchedTokens)
		}
	}
	if s.PrefillEfficiency == 0 {
		s.PrefillEfficiency = 0.5
	}
	if s.RestartTime == 0 {
		s.RestartTime = 90 * time.Second
	}
	if s.TensorParallel == 0 {
		s.TensorParallel = 1
	}
	return s
}

func (s Settings) validate() error {
	var errs []error
	if err := s.GPU.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := s.Model.validate(); err != nil {
		errs = append(errs, err)
	}
	check := func(bad bool, format string, v any) {
		if bad {
			errs = append(errs, fmt.Errorf("sim: Settings."+format, v))
		}
	}
	check(s.GPUMemoryUtilization <= 0 || s.GPUMemoryUtilization > 1, "GPUMemoryUtilization = %v, want (0, 1]", s.GPUMemoryUtilization)
	check(s.MaxNumSeqs < 0, "MaxNumSeqs = %d, want > 0", s.MaxNumSeqs)
	check(s.MaxNumBatchedTokens < 0, "MaxNumBatchedTokens = %d, want > 0", s.MaxNumBatchedTokens)
	check(s.BlockSize < 0, "BlockSize = %d, want > 0", s.BlockSize)
	check(s.MaxModelLen < 0, "MaxModelLen = %d, want > 0", s.MaxModelLen)
	check(s.CUDAContextBytes < 0, "CUDAContextBytes = %d, want >= 0", s.CUDAContextBytes)
	check(s.NonTorchBytes < 0, "NonTorchBytes = %d, want >= 0", s.NonTorchBytes)
	check(s.CUDAGraphBytes < 0, "CUDAGraphBytes = %d, want >= 0", s.CUDAGraphBytes)
	check(s.OtherProcessBytes < 0, "OtherProcessBytes = %d, want >= 0", s.OtherProcessBytes)
	check(s.PrefillEfficiency <= 0 || s.PrefillEfficiency > 1, "PrefillEfficiency = %v, want (0, 1]", s.PrefillEfficiency)
	check(s.MaxSplitSize < 0, "MaxSplitSize = %d, want >= 0", s.MaxSplitSize)
	check(s.CUDAGraphMaxTokens < 0, "CUDAGraphMaxTokens = %d, want >= 0", s.CUDAGraphMaxTokens)
	check(s.Sampler != SamplerFlashInfer && s.Sampler != SamplerSort, "Sampler = %d, want SamplerFlashInfer or SamplerSort", s.Sampler)
	check(s.NumGPUBlocksOverride < 0, "NumGPUBlocksOverride = %d, want >= 0", s.NumGPUBlocksOverride)
	check(s.RestartTime < 0, "RestartTime = %v, want >= 0", s.RestartTime)
	if err := s.Neighbor.validate(); err != nil {
		errs = append(errs, err)
	}
	tp := s.TensorParallel
	check(tp < 1 || (s.Model.KVHeads > 0 && (s.Model.KVHeads%tp != 0 || s.Model.Hidden%tp != 0 || s.Model.Intermediate%tp != 0)),
		"TensorParallel = %d, want >= 1 dividing the model's KV heads, hidden and intermediate sizes", tp)
	check(tp > 1 && s.GPU.LinkBytesPerSec <= 0, "GPU.LinkBytesPerSec = %v, want > 0 with tensor parallelism", s.GPU.LinkBytesPerSec)
	return errors.Join(errs...)
}
