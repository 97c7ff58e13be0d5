package pressure

import (
	"encoding/json"
	"time"
)

// State is a snapshot of everything the Monitor knows, built by Snapshot.
// It is a copy: the caller owns it and may keep it.
type State struct {
	// At is when the snapshot was taken (the Monitor's clock).
	At time.Time `json:"at"`
	// Upstreams holds one entry per configured upstream, in settings order.
	Upstreams []UpstreamState `json:"upstreams"`
	// Sources holds one entry per source, node sources first, then each
	// upstream's in settings order.
	Sources []SourceState `json:"sources"`
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
	Name string `json:"name"`
	// Signals holds, per signal, the value the breaker should act on: the
	// worst over the upstream's GPUs and upstream-level sources (highest;
	// lowest for EffectiveUtilization). A fresh value beats a stale one;
	// a stale value is kept (Stale true) until a fresh one arrives.
	Signals map[Signal]Value `json:"signals"`
	// GPUs holds the per-GPU values behind Signals, ordered by GPU ID.
	GPUs []GPUState `json:"gpus"`
	// Absent lists, in Signals() order, the signals no source has ever
	// yielded for this upstream.
	Absent []Signal `json:"absent"`
}

// GPUState is one GPU's signals within an upstream.
type GPUState struct {
	// ID is the GPU index as the source reported it; UUID where known.
	ID   string `json:"id"`
	UUID string `json:"uuid,omitempty"`
	// Signals holds per signal the worst fresh value over the sources that
	// read this GPU.
	Signals map[Signal]Value `json:"signals"`
}

// ClassicFragmentation returns the classic fragmentation ratio, largest free
// block ÷ total free (≤ 1; the vllm_gpu_memory_fragmentation metric), which
// is the inverse of the Fragmentation signal (gatekeeper_fragmentation_ratio),
// and whether it is present.
func (g GPUState) ClassicFragmentation() (Value, bool) {
	v, ok := g.Signals[Fragmentation]
	if !ok || v.Value <= 0 {
		return Value{}, false
	}
	v.Value = 1 / v.Value
	return v, true
}

// Value is one signal's value with where and when it was read. In JSON
// the age is "age_seconds".
type Value struct {
	Value float64 `json:"value"`
	// Source is the name of the source that yielded it.
	Source string `json:"source"`
	// GPU is the GPU ID it belongs to; empty for upstream-level signals.
	GPU string `json:"gpu,omitempty"`
	// At is when the reading that carried it completed.
	At time.Time `json:"at"`
	// Age is State.At − At.
	Age time.Duration `json:"-"`
	// Stale is true when Age exceeds Settings.StaleAfter.
	Stale bool `json:"stale"`
}

// MarshalJSON writes v with its age in seconds, for /admin/state.
func (v Value) MarshalJSON() ([]byte, error) {
	type plain Value // no MarshalJSON: no recursion
	return json.Marshal(struct {
		plain
		AgeSeconds float64 `json:"age_seconds"`
	}{plain(v), v.Age.Seconds()})
}

// SourceState is one source's health.
type SourceState struct {
	Name string `json:"name"`
	// Kind is the built-in kind, or what SourceSettings.Kind said for a
	// custom Source.
	Kind Kind `json:"kind"`
	// Upstream is the upstream the source belongs to; empty for node sources.
	Upstream string `json:"upstream,omitempty"`
	// Up is true when the latest Read succeeded.
	Up bool `json:"up"`
	// LastSuccess is when the latest good reading completed; zero if none yet.
	LastSuccess time.Time `json:"last_success"`
	// LastError is the latest Read error's text, empty after a success.
	LastError string `json:"last_error,omitempty"`
	// Stale is true when no good reading arrived within StaleAfter (counted
	// from Run's start for a source that never succeeded).
	Stale bool `json:"stale"`
	// NeverAnswered is true when the source has been read and has never
	// succeeded: a configuration problem (DESIGN §3), not pressure. Its
	// signals are absent, so no rule acts on it; it is shown and alerted on.
	NeverAnswered bool `json:"never_answered"`
}
