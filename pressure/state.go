package pressure

import "time"

// State is a snapshot of everything the Monitor knows, built by Snapshot.
// It is a copy: the caller owns it and may keep it.
type State struct {
	// At is when the snapshot was taken (the Monitor's clock).
	At time.Time
	// Upstreams holds one entry per configured upstream, in settings order.
	Upstreams []UpstreamState
	// Sources holds one entry per source, node sources first, then each
	// upstream's in settings order.
	Sources []SourceState
}

// Upstream returns the state of the upstream named name and whether it exists.
func (s State) Upstream(name string) (UpstreamState, bool) {
	for _, u := range s.Upstreams {
		if u.Name == name {
			return u, true
		}
	}
	return UpstreamState{}, false
}

// UpstreamState is one upstream's signals.
type UpstreamState struct {
	Name string
	// Signals holds, per signal, the value the breaker should act on: the
	// worst over the upstream's GPUs and upstream-level sources (highest;
	// lowest for EffectiveUtilization). A fresh value beats a stale one;
	// a stale value is kept (Stale true) until a fresh one arrives.
	Signals map[Signal]Value
	// GPUs holds the per-GPU values behind Signals, ordered by GPU ID.
	GPUs []GPUState
	// Absent lists, in Signals() order, the signals no source has ever
	// yielded for this upstream.
	Absent []Signal
}

// GPUState is one GPU's signals within an upstream.
type GPUState struct {
	// ID is the GPU index as the source reported it; UUID where known.
	ID   string
	UUID string
	// Signals holds per signal the worst fresh value over the sources that
	// read this GPU.
	Signals map[Signal]Value
}

// ClassicFragmentation returns the classic fragmentation ratio, largest free
// block ÷ total free (≤ 1; the vllm_gpu_memory_fragmentation metric), which
// is the inverse of the Fragmentation signal, and whether it is present.
func (g GPUState) ClassicFragmentation() (Value, bool) {
	v, ok := g.Signals[Fragmentation]
	if !ok || v.Value <= 0 {
		return Value{}, false
	}
	v.Value = 1 / v.Value
	return v, true
}

// Value is one signal's value with where and when it was read.
type Value struct {
	Value float64
	// Source is the name of the source that yielded it.
	Source string
	// GPU is the GPU ID it belongs to; empty for upstream-level signals.
	GPU string
	// At is when the reading that carried it completed.
	At time.Time
	// Age is State.At − At.
	Age time.Duration
	// Stale is true when Age exceeds Settings.StaleAfter.
	Stale bool
}

// SourceState is one source's health.
type SourceState struct {
	Name string
	// Kind is the built-in kind, or what SourceSettings.Kind said for a
	// custom Source.
	Kind Kind
	// Upstream is the upstream the source belongs to; empty for node sources.
	Upstream string
	// Up is true when the latest Read succeeded.
	Up bool
	// LastSuccess is when the latest good reading completed; zero if none yet.
	LastSuccess time.Time
	// LastError is the latest Read error's text, empty after a success.
	LastError string
	// Stale is true when no good reading arrived within StaleAfter (counted
	// from Run's start for a source that never succeeded).
	Stale bool
}
