package overload

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"
)

// fakeProbe returns the delay and samples a step set.
type fakeProbe struct {
	delay   time.Duration
	samples uint64
	reads   int
}

func (p *fakeProbe) read() (time.Duration, uint64) { p.reads++; return p.delay, p.samples }

// admitted counts how many of n requests Admit lets go on (each is done at
// once).
func admitted(m *Manager, n int) int {
	ok := 0
	for range n {
		if m.Admit() {
			ok++
			m.Done()
		}
	}
	return ok
}

// TestManagerSheds walks the controller through saturation and back: each
// row advances the fake clock, sets what the probe reports, sends 1 000
// requests, and states how many went on, the share shed after them, and how
// often the probe was read (once per interval, whatever the request rate).
// The shed requests are spread evenly over the sequence of requests, so
// each row's count follows from the share and where the sequence stands.
func TestManagerSheds(t *testing.T) {
	t0 := time.Unix(1_000, 0)
	now := t0
	p := &fakeProbe{}
	m, err := New(Settings{SchedDelay: 4 * time.Millisecond, Probe: p.read, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	const iv = 50 * time.Millisecond // the default interval
	steps := []struct {
		name     string
		advance  time.Duration
		delay    time.Duration
		samples  uint64
		admitted int
		shedding float64
		reads    int
	}{
		{"below the target: nothing shed", 0, time.Millisecond, 1000, 1000, 0, 1},
		{"within the interval the probe is not read again", iv / 2, time.Second, 1000, 1000, 0, 1},
		{"one late interval sheds nothing", iv / 2, 8 * time.Millisecond, 1000, 1000, 0, 2},
		{"two at twice the target: a quarter shed", iv, 8 * time.Millisecond, 1000, 750, 0.25, 3},
		{"far above: the lower of the two, twice the target", iv, time.Second, 1000, 500, 0.5, 4},
		{"far above twice: three quarters more at most, all shed", iv, time.Second, 1000, 0, 1, 5},
		{"no delay: a sixteenth less", iv, 0, 1000, 62, 0.9375, 6},
		{"half the target after none: the lower, a sixteenth less", iv, 2 * time.Millisecond, 1000, 125, 0.875, 7},
		{"half the target: a thirty-second less", iv, 2 * time.Millisecond, 1000, 156, 0.84375, 8},
		{"at the target after half: the lower", iv, 4 * time.Millisecond, 1000, 188, 0.8125, 9},
		{"at the target: holds", iv, 4 * time.Millisecond, 1000, 187, 0.8125, 10},
		{"1.5× after the target: the lower, holds", iv, 6 * time.Millisecond, 1000, 188, 0.8125, 11},
		{"too few samples counts as idle", iv, time.Second, 10, 250, 0.75, 12},
		{"late after idle: the idle interval is the lower", iv, time.Second, 1000, 313, 0.6875, 13},
		{"a long quiet gap is one interval", time.Hour, 0, 1000, 375, 0.625, 14},
	}
	for i, st := range steps {
		now = now.Add(st.advance)
		p.delay, p.samples = st.delay, st.samples
		got := admitted(m, 1000)
		if got != st.admitted || m.Shedding() != st.shedding || p.reads != st.reads {
			t.Fatalf("step %d (%s): admitted %d, shedding %v, probe reads %d; want %d, %v, %d",
				i, st.name, got, m.Shedding(), p.reads, st.admitted, st.shedding, st.reads)
		}
	}
}

// TestManagerMaxInflight: past MaxInflight requests in flight the next is
// shed until one is done; nothing is shed on delay when SchedDelay is 0,
// and the probe is never read.
func TestManagerMaxInflight(t *testing.T) {
	p := &fakeProbe{delay: time.Second, samples: 1000}
	m, err := New(Settings{MaxInflight: 2, Probe: p.read})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		act      string // admit or done
		want     bool   // Admit's answer
		inflight int
	}{
		{"admit", true, 1},
		{"admit", true, 2},
		{"admit", false, 2},
		{"done", false, 1},
		{"admit", true, 2},
		{"admit", false, 2},
		{"done", false, 1},
		{"done", false, 0},
		{"admit", true, 1},
	}
	for i, st := range steps {
		got := false
		if st.act == "admit" {
			got = m.Admit()
		} else {
			m.Done()
		}
		if got != st.want || m.Inflight() != st.inflight {
			t.Fatalf("step %d (%s) = %v, in flight %d; want %v, %d", i, st.act, got, m.Inflight(), st.want, st.inflight)
		}
	}
	if p.reads != 0 {
		t.Errorf("probe read %d times without SchedDelay, want 0", p.reads)
	}
}

// TestManagerZeroSettingsShedNothing: the zero Settings admit everything.
func TestManagerZeroSettingsShedNothing(t *testing.T) {
	m, err := New(Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if got := admitted(m, 10_000); got != 10_000 {
		t.Errorf("admitted %d of 10000, want all", got)
	}
}

func TestNewRejectsBadSettings(t *testing.T) {
	for _, s := range []Settings{
		{SchedDelay: -time.Millisecond},
		{SchedDelay: 10 * time.Microsecond},
		{MaxInflight: -1},
		{Interval: -time.Second},
	} {
		if _, err := New(s); err == nil {
			t.Errorf("New(%+v) = nil error, want one", s)
		}
	}
}

// TestQuantile reads the 99th percentile of histograms shaped as the
// runtime's: buckets has one more bound than counts, the last +Inf.
func TestQuantile(t *testing.T) {
	bounds := []float64{0, 0.001, 0.002, 0.004, math.Inf(1)}
	tests := []struct {
		name    string
		counts  []uint64
		want    time.Duration
		samples uint64
	}{
		{"empty", []uint64{0, 0, 0, 0}, 0, 0},
		{"all in the first bucket", []uint64{100, 0, 0, 0}, time.Millisecond, 100},
		{"1 in 100 late: still the first", []uint64{99, 0, 1, 0}, time.Millisecond, 100},
		{"2 in 100 late", []uint64{98, 0, 2, 0}, 4 * time.Millisecond, 100},
		{"unbounded bucket: its lower bound", []uint64{0, 0, 0, 5}, 4 * time.Millisecond, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, n := quantile(tt.counts, bounds, 0.99)
			if got != tt.want || n != tt.samples {
				t.Errorf("quantile(%v) = %v, %d; want %v, %d", tt.counts, got, n, tt.want, tt.samples)
			}
		})
	}
}

// TestSchedProbeReads reads the runtime's own histogram: the delta since
// the last read, never negative, after goroutines have run.
func TestSchedProbeReads(t *testing.T) {
	p := newSchedProbe()
	var wg sync.WaitGroup
	for range 1000 {
		wg.Go(func() {})
	}
	wg.Wait()
	d, n := p.read()
	if n == 0 || d < 0 || d > time.Minute {
		t.Errorf("read() = %v, %d samples; want some samples and a delay in [0, 1m]", d, n)
	}
}

// TestManagerConcurrent hammers Admit and Done from many goroutines with the
// real clock and probe: in flight returns to 0.
func TestManagerConcurrent(t *testing.T) {
	m, err := New(Settings{SchedDelay: time.Millisecond, MaxInflight: 50, Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() { admitted(m, 2000) })
	}
	wg.Wait()
	if n := m.Inflight(); n != 0 {
		t.Errorf("in flight after all done = %d, want 0", n)
	}
}

func ExampleManager() {
	m, _ := New(Settings{MaxInflight: 1})
	first := m.Admit()
	second := m.Admit()
	m.Done()
	third := m.Admit()
	fmt.Println(first, second, third)
	// Output: true false true
}
