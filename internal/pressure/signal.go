package pressure

// Signal names one pressure signal. Its value is the name used in the policy
// file, in metrics labels and in /admin/state. Info says its unit, whether it
// is read per GPU or per upstream, and which source kinds yield it.
type Signal string

// The signals of DESIGN §3. Each comment says what the value is; it is
// docs/signals.md's meaning column.
const (
	// Fragmentation is total free ÷ largest free block (≥ 1; 1 means all free
	// memory is one block).
	Fragmentation Signal = "fragmentation"
	// KVCacheUsage is the fraction of vLLM's KV-cache blocks in use (0–1).
	KVCacheUsage Signal = "kv_cache_usage"
	// MemoryUsed is device memory used ÷ total (0–1).
	MemoryUsed Signal = "memory_used"
	// PreemptionRate is vLLM preemptions per second, smoothed.
	PreemptionRate Signal = "preemption_rate"
	// Waiting is the number of requests queued inside vLLM.
	Waiting Signal = "waiting"
	// Running is the number of requests in vLLM's running batch.
	Running Signal = "running"
	// AllocRetryRate is allocator retries (cache flush + retry) per second,
	// smoothed.
	AllocRetryRate Signal = "alloc_retry_rate"
	// FragmentationGrowth is the change of fragmentation per second,
	// smoothed.
	FragmentationGrowth Signal = "fragmentation_growth"
	// EffectiveUtilization is allocated ÷ reserved bytes of the caching
	// allocator (0–1): how much of what the process holds does work. Lower
	// is not "worse" for the breaker; an upstream reports its lowest GPU.
	EffectiveUtilization Signal = "effective_utilization"
	// FreeMemory is the bytes the serving process can still allocate:
	// memory_blocks' free_bytes (driver free plus the caching allocator's
	// free cached blocks). Lower is worse; an upstream reports its lowest
	// GPU. It feeds memory admission (the windows' memory budgets), not a
	// rule.
	FreeMemory Signal = "free_memory_bytes"
)

// Signals lists every signal in a fixed order (the order of State.Absent).
// It returns a new slice on each call.
func Signals() []Signal {
	return []Signal{
		Fragmentation, KVCacheUsage, MemoryUsed, PreemptionRate, Waiting,
		Running, AllocRetryRate, FragmentationGrowth, EffectiveUtilization, FreeMemory,
	}
}

// String returns the signal's name.
func (s Signal) String() string { return string(s) }

// ParseSignal returns the signal named name and whether it exists.
func ParseSignal(name string) (Signal, bool) {
	for _, s := range Signals() {
		if string(s) == name {
			return s, true
		}
	}
	return "", false
}

// worse reports whether a is worse than b for signal s: higher for every
// signal except EffectiveUtilization and FreeMemory, where the lower value is
// reported.
func (s Signal) worse(a, b float64) bool {
	if s == EffectiveUtilization || s == FreeMemory {
		return a < b
	}
	return a > b
}

// Kind names a built-in kind of source.
type Kind string

// The built-in source kinds (DESIGN §3, the policy's sources[].kind).
const (
	KindNVML         Kind = "nvml"
	KindVLLM         Kind = "vllm"
	KindDCGM         Kind = "dcgm"
	KindMemoryBlocks Kind = "memory_blocks"
)

// String returns the kind's name.
func (k Kind) String() string { return string(k) }
