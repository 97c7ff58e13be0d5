package gcfloor

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"
)

const mib = 1 << 20

// goal is the runtime's heap goal after a cycle that left h, under GOGC p
// (runtime/mgcpacer.go: commit).
func goal(h Heap, p int) uint64 {
	g := h.Live + (h.Live+h.Stacks+h.Globals)*uint64(p)/100
	return max(g, runtimeMinimum*uint64(p)/100)
}

func TestPercent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		h     Heap
		floor uint64
		base  int
		want  int
	}{
		{name: "before the first cycle", floor: 16 * mib, base: 100, want: 400},
		{name: "an idle proxy", h: Heap{Live: 1 * mib, Stacks: 64 << 10, Globals: 256 << 10}, floor: 16 * mib, base: 100, want: 400},
		{name: "the live rule needs less than the minimum", h: Heap{Live: 4 * mib}, floor: 16 * mib, base: 100, want: 300},
		{name: "stacks count in the goal", h: Heap{Live: 4 * mib, Stacks: 2 * mib}, floor: 16 * mib, base: 100, want: 200},
		{name: "large enough for the base", h: Heap{Live: 8 * mib, Stacks: 1 * mib}, floor: 16 * mib, base: 100, want: 100},
		{name: "above the floor", h: Heap{Live: 200 * mib, Stacks: 80 * mib}, floor: 16 * mib, base: 100, want: 100},
		{name: "live exactly the floor", h: Heap{Live: 16 * mib}, floor: 16 * mib, base: 100, want: 100},
		{name: "no floor", h: Heap{Live: 1 * mib}, base: 100, want: 100},
		{name: "a base above the cap stays", h: Heap{Live: 1 * mib}, floor: 16 * mib, base: 500, want: 500},
		{name: "a smaller floor", h: Heap{Live: 1 * mib}, floor: 8 * mib, base: 100, want: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Percent(tt.h, tt.floor, tt.base); got != tt.want {
				t.Errorf("Percent(%+v, %d, %d) = %d, want %d", tt.h, tt.floor, tt.base, got, tt.want)
			}
		})
	}
}

// TestPercentIsTheLeastThatReachesTheFloor checks Percent against the
// runtime's rule over a grid: its GOGC reaches the floor, one less does not
// (unless it is the base or the cap), and it never passes the cap.
func TestPercentIsTheLeastThatReachesTheFloor(t *testing.T) {
	t.Parallel()
	const floor, base = 16 * mib, 100
	capped := int(ceilDiv(100*floor, runtimeMinimum))
	for live := uint64(0); live <= 24*mib; live += 256 << 10 {
		for _, stacks := range []uint64{0, 64 << 10, 2 * mib, 20 * mib} {
			h := Heap{Live: live, Stacks: stacks, Globals: 300 << 10}
			p := Percent(h, floor, base)
			name := fmt.Sprintf("live %d, stacks %d: GOGC %d", live, stacks, p)
			switch {
			case p > capped:
				t.Errorf("%s: above the cap %d", name, capped)
			case goal(h, p) < floor:
				t.Errorf("%s: goal %d below the floor", name, goal(h, p))
			case p > base && goal(h, p-1) >= floor:
				t.Errorf("%s: GOGC %d already reaches the floor", name, p-1)
			}
		}
	}
}

func TestStartLeavesAnOperatorsGOGC(t *testing.T) {
	t.Parallel()
	getenv := func(k string) string {
		if k == "GOGC" {
			return "200"
		}
		return ""
	}
	if tu := Start(getenv); tu != nil {
		tu.Stop()
		t.Fatal("Start tuned GOGC although the environment sets it")
	}
	var none *Tuner
	none.Stop() // a nil Tuner's Stop does nothing
}

// recorder plays debug.SetGCPercent and collects each cycle's adjustment.
type recorder struct {
	mu   sync.Mutex
	sets []int
	heap Heap
	done chan int
}

func (r *recorder) set(p int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sets = append(r.sets, p)
	return 100
}

func (r *recorder) read() Heap {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.heap
}

func (r *recorder) setHeap(h Heap) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.heap = h
}

func (r *recorder) setsSoFar() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.sets...)
}

// nextAdjustment runs a collection and returns the adjustment that follows
// it. runtime.GC returns once a whole cycle, sweep included, has ended
// after the call, so the sentinel armed before it has been found
// unreachable and its cleanup queued; the wait is for the cleanup goroutine.
func (r *recorder) nextAdjustment(t *testing.T) int {
	t.Helper()
	runtime.GC()
	select {
	case p := <-r.done:
		return p
	case <-time.After(time.Minute):
		t.Fatal("no adjustment within a minute of a collection")
		return 0
	}
}

// TestTunerFollowsEachCycle is not parallel: it turns the process's
// collector off, so that the only cycles are its own runtime.GC calls (the
// Tuner's GOGC goes to the recorder, not the runtime).
func TestTunerFollowsEachCycle(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	r := &recorder{heap: Heap{Live: 1 * mib}, done: make(chan int, 16)}
	tu := New(Settings{Read: r.read, Set: r.set, Adjusted: func(p int) { r.done <- p }})
	defer tu.Stop()
	if p := <-r.done; p != 400 {
		t.Fatalf("at start: GOGC %d, want 400", p)
	}
	if p := r.nextAdjustment(t); p != 400 {
		t.Fatalf("small heap: GOGC %d, want 400", p)
	}
	r.setHeap(Heap{Live: 64 * mib, Stacks: 8 * mib})
	if p := r.nextAdjustment(t); p != 100 {
		t.Fatalf("large heap: GOGC %d, want 100", p)
	}
	r.setHeap(Heap{Live: 4 * mib})
	if p := r.nextAdjustment(t); p != 300 {
		t.Fatalf("heap shrunk: GOGC %d, want 300", p)
	}
	if got, want := fmt.Sprint(r.setsSoFar()), "[400 100 300]"; got != want {
		t.Fatalf("GOGC set to %s, want %s: only changes are set", got, want)
	}
	tu.Stop()
	tu.Stop()
	if got, want := fmt.Sprint(r.setsSoFar()), "[400 100 300 100]"; got != want {
		t.Fatalf("after Stop: GOGC set to %s, want %s (the base, once)", got, want)
	}
}

// TestTunerSetsTheRuntimesGOGC runs the real thing: after a collection the
// runtime's GOGC is the one Percent gives for the heap that collection
// left. Not parallel: it sets the process's GOGC.
func TestTunerSetsTheRuntimesGOGC(t *testing.T) {
	type adjustment struct {
		h Heap
		p int
	}
	done := make(chan adjustment, 16)
	var mu sync.Mutex // the heap the Tuner read last, under its lock
	var last Heap
	read := newReader().read
	tu := New(Settings{
		Read: func() Heap { mu.Lock(); defer mu.Unlock(); last = read(); return last },
		Adjusted: func(p int) {
			mu.Lock()
			defer mu.Unlock()
			done <- adjustment{last, p}
		},
	})
	<-done
	runtime.GC()
	var a adjustment
	select {
	case a = <-done:
	case <-time.After(time.Minute):
		t.Fatal("no adjustment within a minute of a collection")
	}
	if a.h.Live == 0 || a.h.Globals == 0 {
		t.Fatalf("read %+v after a collection: the runtime/metrics names are wrong", a.h)
	}
	p := a.p
	if want := Percent(a.h, DefaultFloor, 100); p != want {
		t.Errorf("adjusted to GOGC %d, want %d for %+v", p, want, a.h)
	}
	// A test binary's live heap is far below the floor.
	if a.h.Live < 3*mib && p != 400 {
		t.Errorf("adjusted to GOGC %d for %+v, want 400", p, a.h)
	}
	if got := readGOGC(); got != p {
		t.Errorf("the runtime's GOGC is %d, want %d", got, p)
	}
	tu.Stop()
	if got := readGOGC(); got != 100 {
		t.Errorf("after Stop the runtime's GOGC is %d, want 100", got)
	}
}

func readGOGC() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}
