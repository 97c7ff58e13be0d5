package sim

import "time"

// Counters are the cumulative vLLM counters of the current engine process.
// Like vLLM's Prometheus counters they start again from zero after a restart.
type Counters struct {
	// Preemptions is vllm:num_preemptions_total.
	Preemptions int64
	// PromptTokens is vllm:prompt_tokens_total (counted once per request).
	PromptTokens int64
	// GenerationTokens is vllm:generation_tokens_total.
	GenerationTokens int64
	// RequestSuccess is vllm:request_success_total.
	RequestSuccess int64
}

// Metrics is a snapshot of what a vLLM pod exposes, plus the simulator's own
// lifetime figures.
type Metrics struct {
	// Now is the engine's virtual time.
	Now time.Duration
	// Alive is false while the engine restarts after an OOM.
	Alive bool
	// Running and Waiting are vllm:num_requests_running and _waiting.
	Running, Waiting int
	// KVCacheUsage is vllm:kv_cache_usage_perc, 0–1.
	KVCacheUsage float64
	// NumGPUBlocks and BlockSize are vllm:cache_config_info's labels.
	NumGPUBlocks, BlockSize int
	// Counters are the process's counters (zero while dead).
	Counters Counters
	// Device is the NVML view of the GPU.
	Device DeviceMemory
	// Allocator is the caching allocator's snapshot (zero while dead).
	Allocator AllocStats
	// OOMs, Restarts and Steps count over the engine's whole life;
	// FailedBoots the restarts vLLM refused (too little free memory).
	OOMs, Restarts, Steps, FailedBoots int64
	// NeighborBytes is what the other processes on the GPU hold
	// (OtherProcessBytes and the Neighbor); NeighborFailures counts the
	// neighbour's requests the device could not meet.
	NeighborBytes, NeighborFailures int64
}

// DeviceMemory is what NVML reports: everything the processes hold is used.
type DeviceMemory struct {
	TotalBytes, UsedBytes, FreeBytes int64
}

// MemoryBlocks is DESIGN §3's allocator endpoint object for one GPU.
type MemoryBlocks struct {
	GPUID                 string  `json:"gpu_id"`
	TotalBytes            int64   `json:"total_bytes"`
	UsedBytes             int64   `json:"used_bytes"`
	FreeBytes             int64   `json:"free_bytes"`
	LargestFreeBlockBytes int64   `json:"largest_free_block_bytes"`
	ReservedBytes         int64   `json:"reserved_bytes"`
	AllocatedBytes        int64   `json:"allocated_bytes"`
	BlockCount            int     `json:"block_count"`
	FragmentationRatio    float64 `json:"fragmentation_ratio"`
	AllocRetryCount       int64   `json:"alloc_retry_count"`
	// InactiveSplitBytes is an extra field (DESIGN §3 ignores unknown ones):
	// PyTorch's inactive_split_bytes, the free memory stranded in split
	// segments. The rest of the cached free memory (reserved − allocated −
	// inactive split) is whole free segments that empty_cache would release.
	InactiveSplitBytes int64 `json:"inactive_split_bytes"`
}

// Metrics returns a snapshot.
func (e *Engine) Metrics() Metrics {
	m := Metrics{
		Now: e.now, Alive: !e.dead, Running: len(e.running), Waiting: e.waitingCount(),
		NumGPUBlocks: e.plan.NumGPUBlocks, BlockSize: e.s.BlockSize, Counters: e.c,
		OOMs: e.ooms, Restarts: e.restarts, Steps: e.steps, FailedBoots: e.failedBoots,
		NeighborBytes: e.s.OtherProcessBytes + e.s.Neighbor.Base + e.nbHeld(),
	}
	if e.nb != nil {
		m.NeighborFailures = e.nb.failures
	}
	total := e.s.GPU.MemoryBytes
	m.Device = DeviceMemory{TotalBytes: total, UsedBytes: m.NeighborBytes}
	if !e.dead {
		m.KVCacheUsage = float64(e.plan.NumGPUBlocks-e.freeBlocks) / float64(e.plan.NumGPUBlocks)
		m.Allocator = e.alloc.Stats()
		m.Device.UsedBytes += e.s.CUDAContextBytes + e.s.NonTorchBytes + e.s.CUDAGraphBytes + m.Allocator.ReservedBytes
	}
	m.Device.FreeBytes = total - m.Device.UsedBytes
	return m
}

// MemoryBlocks returns the allocator endpoint's figures for this GPU: free
// counts the device's unreserved memory plus the allocator's cached free
// blocks, used is the rest. While the engine is dead the process holds
// nothing: the device reads as free except for other processes.
func (e *Engine) MemoryBlocks(gpuID string) MemoryBlocks {
	m := e.Metrics()
	a := m.Allocator
	if e.s.MidStepReadings && !e.dead && e.now > e.until && e.step.midValid {
		a = e.step.mid // a step is running: its buffers are live
	}
	mb := MemoryBlocks{GPUID: gpuID, TotalBytes: m.Device.TotalBytes, ReservedBytes: a.ReservedBytes,
		AllocatedBytes: a.AllocatedBytes, BlockCount: a.Blocks, AllocRetryCount: a.NumAllocRetries,
		InactiveSplitBytes: a.InactiveSplitBytes}
	if e.dead {
		mb.FreeBytes = m.Device.FreeBytes
		mb.LargestFreeBlockBytes = m.Device.FreeBytes
	} else {
		mb.FreeBytes = a.FreeBytes()
		mb.LargestFreeBlockBytes = a.LargestFreeBlockBytes()
	}
	mb.UsedBytes = mb.TotalBytes - mb.FreeBytes
	mb.FragmentationRatio = 1
	if mb.FreeBytes > 0 {
		mb.FragmentationRatio = float64(mb.LargestFreeBlockBytes) / float64(mb.FreeBytes)
	}
	return mb
}

func (e *Engine) waitingCount() int {
	n := 0
	for i := range e.waiting.size {
		if e.waiting.buf[(e.waiting.head+i)%len(e.waiting.buf)].state == SeqWaiting {
			n++
		}
	}
	return n
}
