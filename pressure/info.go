package pressure

// SignalInfo describes a signal for people: what its value measures, where
// it is read and which sources yield it. docs/signals.md is generated from
// it (with the policy's rules); TestSignalInfo proves Kinds, PerGPU and Rate
// against the parsers.
type SignalInfo struct {
	// Unit is what the value counts, as docs print it: "ratio ≥ 1",
	// "fraction 0–1", "per second", "requests", "bytes".
	Unit string
	// PerGPU is true for a signal read per GPU (an upstream takes its worst
	// GPU), false for one read per upstream.
	PerGPU bool
	// Kinds are the built-in source kinds whose readings yield the signal.
	Kinds []Kind
	// Rate is true for a signal derived from successive readings of one
	// source (a smoothed per-second rate): absent until its second reading.
	Rate bool
}

// Info returns s's description; the zero SignalInfo for an unknown signal.
// Each call returns a new Kinds slice.
func (s Signal) Info() SignalInfo {
	switch s {
	case Fragmentation:
		return SignalInfo{Unit: "ratio ≥ 1", PerGPU: true, Kinds: []Kind{KindMemoryBlocks}}
	case KVCacheUsage:
		return SignalInfo{Unit: "fraction 0–1", Kinds: []Kind{KindVLLM}}
	case MemoryUsed:
		return SignalInfo{Unit: "fraction 0–1", PerGPU: true, Kinds: []Kind{KindNVML, KindDCGM, KindMemoryBlocks}}
	case PreemptionRate:
		return SignalInfo{Unit: "per second", Kinds: []Kind{KindVLLM}, Rate: true}
	case Waiting, Running:
		return SignalInfo{Unit: "requests", Kinds: []Kind{KindVLLM}}
	case AllocRetryRate:
		return SignalInfo{Unit: "per second", PerGPU: true, Kinds: []Kind{KindMemoryBlocks}, Rate: true}
	case FragmentationGrowth:
		return SignalInfo{Unit: "per second", PerGPU: true, Kinds: []Kind{KindMemoryBlocks}, Rate: true}
	case EffectiveUtilization:
		return SignalInfo{Unit: "fraction 0–1", PerGPU: true, Kinds: []Kind{KindMemoryBlocks}}
	case FreeMemory:
		return SignalInfo{Unit: "bytes", PerGPU: true, Kinds: []Kind{KindMemoryBlocks}}
	}
	return SignalInfo{}
}
