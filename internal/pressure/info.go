package pressure

// SignalInfo describes a signal for people: what its value measures, where
// it is read and which sources yield it. docs/signals.md is generated from
// it (with the policy's rules); TestSignalInfo proves Kinds, PerGPU and Rate
// against the parsers.
type SignalInfo struct {
	// Unit is what the value counts, as docs print it: one of the Unit
	// constants. The admin metrics export each unit under its own family.
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

// The units of SignalInfo.Unit, as docs print them. Ratios, fractions and
// request counts are dimensionless; per-second rates and bytes are not.
const (
	UnitRatio     = "ratio ≥ 1"
	UnitFraction  = "fraction 0–1"
	UnitPerSecond = "per second"
	UnitRequests  = "requests"
	UnitBytes     = "bytes"
)

// Info returns s's description; the zero SignalInfo for an unknown signal.
// Each call returns a new Kinds slice.
func (s Signal) Info() SignalInfo {
	switch s {
	case Fragmentation:
		return SignalInfo{Unit: UnitRatio, PerGPU: true, Kinds: []Kind{KindMemoryBlocks}}
	case KVCacheUsage:
		return SignalInfo{Unit: UnitFraction, Kinds: []Kind{KindVLLM}}
	case MemoryUsed:
		return SignalInfo{Unit: UnitFraction, PerGPU: true, Kinds: []Kind{KindNVML, KindDCGM, KindMemoryBlocks}}
	case PreemptionRate:
		return SignalInfo{Unit: UnitPerSecond, Kinds: []Kind{KindVLLM}, Rate: true}
	case Waiting, Running:
		return SignalInfo{Unit: UnitRequests, Kinds: []Kind{KindVLLM}}
	case AllocRetryRate:
		return SignalInfo{Unit: UnitPerSecond, PerGPU: true, Kinds: []Kind{KindMemoryBlocks}, Rate: true}
	case FragmentationGrowth:
		return SignalInfo{Unit: UnitPerSecond, PerGPU: true, Kinds: []Kind{KindMemoryBlocks}, Rate: true}
	case EffectiveUtilization:
		return SignalInfo{Unit: UnitFraction, PerGPU: true, Kinds: []Kind{KindMemoryBlocks}}
	case FreeMemory:
		return SignalInfo{Unit: UnitBytes, PerGPU: true, Kinds: []Kind{KindMemoryBlocks}}
	}
	return SignalInfo{}
}
