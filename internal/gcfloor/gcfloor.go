// Package gcfloor keeps the garbage collector's heap goal at or above a
// floor while the live heap is small, and leaves GOGC's proportional rule
// alone once it is large (issue 38).
//
// A proxy's live heap is small while it allocates for every request, so
// with GOGC=100 the runtime's 4 MB minimum goal makes it collect several
// times a second under load, and the requests that overlap a mark phase
// pay its assists: they were the slowest percent (bench/README.md). A
// higher GOGC alone would also multiply the heap of thousands of open
// streams, whose live heap is large; the floor raises GOGC only as far as
// the floor needs, from the heap the last cycle left.
//
// After each cycle (a cleanup on a sentinel object, re-armed every time) the
// Tuner reads the live heap, the stacks and globals the cycle scanned
// (runtime/metrics), and sets the least GOGC, never below Base, that gives a
// goal of at least Floor under the runtime's own rule:
//
//	goal = max(4 MiB × GOGC/100, live + (live + stacks + globals) × GOGC/100)
//
// GOGC is capped where the first term alone reaches the floor (400 for the
// 16 MiB default). GOMEMLIMIT still bounds the heap, and a GOGC set in the
// environment turns the floor off: the operator chose.
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// DefaultFloor is the heap goal a Tuner keeps at least, in bytes:
// 16 MiB, chosen by measurement (bench/README.md).
const DefaultFloor = 16 << 20

// runtimeMinimum is the runtime's minimum heap goal at GOGC=100
// (runtime.defaultHeapMinimum); it scales with GOGC.
const runtimeMinimum = 4 << 20

// Heap is what the last collection left, in bytes.
type Heap struct {
	// Live is the heap the cycle marked live.
	Live uint64
	// Stacks and Globals are the goroutine stacks and globals it scanned.
	Stacks, Globals uint64
}

// Percent returns the least GOGC, at least base, that makes the runtime's
// heap goal after a cycle that left h at least floor; at most the GOGC
// whose minimum goal alone is floor (or base, if higher). floor 0 gives
// base.
func Percent(h Heap, floor uint64, base int) int {
	if floor == 0 {
		return base
	}
	p := ceilDiv(100*floor, runtimeMinimum) // the minimum goal alone reaches the floor
	if scan := h.Live + h.Stacks + h.Globals; scan > 0 {
		if h.Live >= floor {
			return base
		}
		p = min(p, ceilDiv(100*(floor-h.Live), scan))
	}
	return max(base, int(p))
}

func ceilDiv(a, b uint64) uint64 { return (a + b - 1) / b }

// Settings configures a Tuner. The zero value selects the defaults.
type Settings struct {
	// Floor is the least heap goal, in bytes. 0 means DefaultFloor.
	Floor uint64
	// Base is the GOGC kept once the live heap is large enough. 0 means
	// 100, the runtime's default.
	Base int
	// Read returns what the last cycle left. Nil reads runtime/metrics.
	Read func() Heap
	// Set sets GOGC and returns the previous setting. Nil means
	// debug.SetGCPercent.
	Set func(percent int) int
	// Adjusted, if set, is called after each cycle's adjustment with the
	// GOGC then in force, on the runtime's cleanup goroutine.
	Adjusted func(percent int)
}

// Tuner adjusts GOGC after each collection. Create one with Start or New;
// it must not be copied.
type Tuner struct {
	s Settings

	mu      sync.Mutex
	percent int  // the GOGC last set
	stopped bool // Stop was called: set nothing more
}

// Start starts a Tuner with the default settings, unless getenv("GOGC") is
// set (then it returns nil and tunes nothing). Call it once, at the start of
// main.
func Start(getenv func(string) string) *Tuner {
	if getenv("GOGC") != "" {
		return nil
	}
	return New(Settings{})
}

// New starts a Tuner: it sets GOGC for the heap as it is now and again
// after every collection until Stop.
func New(s Settings) *Tuner {
	if s.Floor == 0 {
		s.Floor = DefaultFloor
	}
	if s.Base == 0 {
		s.Base = 100
	}
	if s.Read == nil {
		s.Read = newReader().read
	}
	if s.Set == nil {
		s.Set = debug.SetGCPercent
	}
	t := &Tuner{s: s, percent: -1}
	t.adjust()
	return t
}

// sentinel is allocated after each cycle and dropped at once: its cleanup
// runs after the next cycle that finds it unreachable. It holds a pointer
// so that the tiny allocator, which batches small pointer-free objects,
// never places it.
type sentinel struct{ _ *sentinel }

// adjust sets GOGC from the heap the last cycle left and arms the next
// adjustment, unless stopped.
func (t *Tuner) adjust() {
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		return
	}
	p := Percent(t.s.Read(), t.s.Floor, t.s.Base)
	if p != t.percent {
		t.s.Set(p)
		t.percent = p
	}
	t.mu.Unlock()
	runtime.AddCleanup(new(sentinel), (*Tuner).adjust, t)
	if t.s.Adjusted != nil {
		t.s.Adjusted(p)
	}
}

// Stop ends the adjustments and sets GOGC back to Base. A nil Tuner does
// nothing.
func (t *Tuner) Stop() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.stopped = true
		t.s.Set(t.s.Base)
	}
}

// reader reads Heap from runtime/metrics; its samples are reused, under
// the Tuner's lock.
type reader struct{ samples []metrics.Sample }

func newReader() *reader {
	return &reader{samples: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
	}}
}

func (r *reader) read() Heap {
	metrics.Read(r.samples)
	v := func(i int) uint64 {
		if r.samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return r.samples[i].Value.Uint64()
	}
	return Heap{Live: v(0), Stacks: v(1), Globals: v(2)}
}
