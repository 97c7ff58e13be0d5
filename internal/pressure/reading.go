package pressure

import "context"

// Source is one place the Monitor reads pressure from. The Monitor calls
// Read from a single goroutine, never concurrently with itself, with a
// context that carries the per-read timeout. A Source that also implements
// io.Closer is closed when Run returns.
type Source interface {
	// Name identifies the source in State, metrics and logs; unique per Monitor.
	Name() string
	// Read takes one reading. An error marks the source down until a later
	// Read succeeds; the last good reading is kept.
	Read(ctx context.Context) (Reading, error)
}

// Reading is what one successful Read returns. Absent keys mean absent
// signals, never zero.
type Reading struct {
	// Values holds upstream-level signal values (a vLLM pod's KV usage,
	// queue). Node-level sources leave it empty: they cannot name an upstream.
	Values map[Signal]float64
	// Counters holds upstream-level cumulative counters, keyed by the rate
	// signal the Monitor derives from them (PreemptionRate). A value lower
	// than the previous one is a counter reset.
	Counters map[Signal]float64
	// GPUs holds per-GPU values.
	GPUs []GPUReading
}

// GPUReading is one GPU's part of a Reading.
type GPUReading struct {
	// ID is the GPU's index as a string ("0"), as NVML, DCGM's gpu label and
	// the allocator endpoint's gpu_id name it.
	ID string
	// UUID is the GPU's UUID ("GPU-…") where the source knows it.
	UUID string
	// Name is the device's product name where the source knows it.
	Name string
	// host is the node name where the source knows it (DCGM's Hostname).
	host string
	// Values holds signal values for this GPU.
	Values map[Signal]float64
	// Counters holds cumulative counters keyed by the rate signal derived
	// from them (AllocRetryRate).
	Counters map[Signal]float64
}
