package config

import "log/slog"

// Mode says whether decisions are applied or only observed.
type Mode string

// The modes.
const (
	ModeEnforce Mode = "enforce" // refuse, queue and slow down work (the default)
	ModeObserve Mode = "observe" // compute, count and log every decision; refuse nothing
)

// SourceKind names a kind of pressure source.
type SourceKind string

// The source kinds.
const (
	SourceNVML         SourceKind = "nvml"          // local GPUs through NVML; takes no url
	SourceVLLM         SourceKind = "vllm"          // a vLLM /metrics endpoint (per pod)
	SourceDCGM         SourceKind = "dcgm"          // a DCGM exporter /metrics endpoint
	SourceMemoryBlocks SourceKind = "memory_blocks" // an allocator endpoint (JSON memory_blocks)
)

// OnStale says what a stale or failing source means for the level.
type OnStale string

// The stale policies.
const (
	OnStaleDegrade OnStale = "degrade" // treat the upstream as degraded (the default)
	OnStaleHold    OnStale = "hold"    // keep the last level
	OnStaleIgnore  OnStale = "ignore"  // drop the stale signals
)

// QueueOrder says how waiters of one priority leave the queue.
type QueueOrder string

// The queue orders.
const (
	// OrderShortestFirst: by arrival while every pod is normal, shortest
	// estimate first while one is degraded, critical or recovering.
	OrderShortestFirst QueueOrder = "shortest_first"
	// OrderEarliestDeadline: the earliest time-to-first-token deadline
	// first, always (waiters without one after, by arrival).
	OrderEarliestDeadline QueueOrder = "earliest_deadline"
)

// Signal names a pressure signal.
type Signal string

// The signals a rule may name.
const (
	signalFragmentation  Signal = "fragmentation"    // total free ÷ largest free block, ≥ 1
	signalKVCacheUsage   Signal = "kv_cache_usage"   // vLLM KV-cache usage, 0–1
	signalMemoryUsed     Signal = "memory_used"      // device memory used ÷ total, 0–1
	signalPreemptionRate Signal = "preemption_rate"  // vLLM preemptions per second
	signalWaiting        Signal = "waiting"          // requests waiting inside vLLM
	signalAllocRetryRate Signal = "alloc_retry_rate" // allocator retries per second
)

// Signals returns every known signal, in a stable order.
func Signals() []Signal {
	return []Signal{signalFragmentation, signalKVCacheUsage, signalMemoryUsed,
		signalPreemptionRate, signalWaiting, signalAllocRetryRate}
}

// LogLevel is the least severe level logged.
type LogLevel string

// The log levels.
const (
	logDebug LogLevel = "debug"
	logInfo  LogLevel = "info"
	logWarn  LogLevel = "warn"
	logError LogLevel = "error"
)

// Slog returns the slog level; an unknown level reads as info.
func (l LogLevel) Slog() slog.Level {
	switch l {
	case logDebug:
		return slog.LevelDebug
	case logWarn:
		return slog.LevelWarn
	case logError:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// String returns the mode as written in the file.
func (m Mode) String() string { return string(m) }

// String returns the kind as written in the file.
func (k SourceKind) String() string { return string(k) }

// String returns the policy as written in the file.
func (o OnStale) String() string { return string(o) }

// String returns the signal's name.
func (s Signal) String() string { return string(s) }

// String returns the level as written in the file.
func (l LogLevel) String() string { return string(l) }
