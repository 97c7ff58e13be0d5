package sim

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Neighbor is another process on the same GPU (a second engine, a batch
// job): outside the engine's caching allocator, so NVML and the device's
// free memory see it and the allocator does not. It holds Base from before
// the engine starts (vLLM's start-up check counts it) and grows at each of
// its Peaks. The zero value is no neighbour.
type Neighbor struct {
	// Base is the memory it holds throughout.
	Base int64
	// Peaks are when it takes more, and for how long; in any order.
	Peaks []NeighborPeak
}

// NeighborPeak is one spell of a neighbour's growth: at At it asks the
// device for Share of the memory then free (vllm-omni#4285's fault
// injection takes 92 % of it), or for Bytes when Share is 0, and gives it
// back after For. A request the device cannot meet fails inside the
// neighbour, which then takes nothing (Metrics.NeighborFailures).
type NeighborPeak struct {
	At, For time.Duration
	Share   float64
	Bytes   int64
}

func (n Neighbor) validate() error {
	var errs []error
	if n.Base < 0 {
		errs = append(errs, fmt.Errorf("sim: Settings.Neighbor.Base = %d, want >= 0", n.Base))
	}
	for i, p := range n.Peaks {
		if p.At < 0 || p.For <= 0 || p.Share < 0 || p.Share > 1 || p.Bytes < 0 || (p.Share == 0) == (p.Bytes == 0) {
			errs = append(errs, fmt.Errorf("sim: Settings.Neighbor.Peaks[%d] = %+v: want At ≥ 0, For > 0, and one of Share in (0, 1] or Bytes > 0", i, p))
		}
	}
	return errors.Join(errs...)
}

// neighborEvent is a peak's start (take) or end (give back).
type neighborEvent struct {
	at   time.Duration
	peak int // index into the sorted peaks
	end  bool
}

// neighbor is a Neighbor's state inside an Engine.
type neighbor struct {
	peaks    []NeighborPeak  // sorted by At
	events   []neighborEvent // in time order; ends before starts at one instant
	next     int
	held     int64   // beyond Base
	taken    []int64 // by peak: what its start took (0: nothing)
	failures int64
}

func newNeighbor(n Neighbor) *neighbor {
	peaks := slices.Clone(n.Peaks)
	slices.SortStableFunc(peaks, func(a, b NeighborPeak) int { return int(a.At - b.At) })
	nb := &neighbor{peaks: peaks, taken: make([]int64, len(peaks))}
	for i, p := range peaks {
		nb.events = append(nb.events, neighborEvent{at: p.At, peak: i}, neighborEvent{at: p.At + p.For, peak: i, end: true})
	}
	slices.SortStableFunc(nb.events, func(a, b neighborEvent) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		if a.end != b.end {
			if a.end {
				return -1
			}
			return 1
		}
		return a.peak - b.peak
	})
	return nb
}

// neighborTo applies the neighbour's events up to t: it takes from and
// gives back to what the device has free, which the engine's allocator
// draws its segments from.
func (e *Engine) neighborTo(t time.Duration) {
	nb := e.nb
	if nb == nil {
		return
	}
	peaks := nb.peaks
	for nb.next < len(nb.events) && nb.events[nb.next].at <= t {
		ev := nb.events[nb.next]
		nb.next++
		if ev.end {
			nb.held -= nb.taken[ev.peak]
			e.setDevice(e.deviceFree() + nb.taken[ev.peak])
			nb.taken[ev.peak] = 0
			continue
		}
		free := e.deviceFree()
		want := peaks[ev.peak].Bytes
		if s := peaks[ev.peak].Share; s > 0 {
			want = int64(s * float64(free))
		}
		if want > free {
			nb.failures++
			continue
		}
		nb.held += want
		nb.taken[ev.peak] = want
		e.setDevice(free - want)
	}
}

// deviceFree is what the device can still hand out to the engine's
// allocator (all of its share while the engine is down).
func (e *Engine) deviceFree() int64 {
	if e.alloc == nil {
		return e.s.deviceBytes() - e.s.OtherProcessBytes - e.s.Neighbor.Base - e.nbHeld()
	}
	st := e.alloc.Stats()
	return st.DeviceFreeBytes
}

// setDevice gives the engine's allocator free bytes to draw from, beyond
// the segments it holds.
func (e *Engine) setDevice(free int64) {
	if e.alloc != nil {
		e.alloc.s.DeviceBytes = e.alloc.reserved + free
		e.alloc.version++ // a step that fitted before may not now
	}
}

// nbHeld is what the neighbour holds beyond its base.
func (e *Engine) nbHeld() int64 {
	if e.nb == nil {
		return 0
	}
	return e.nb.held
}
