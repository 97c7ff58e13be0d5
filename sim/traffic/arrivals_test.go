package traffic

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestPatternRate(t *testing.T) {
	p := Pattern{BaseQPS: 2, BurstQPS: 8, Steady: 30 * time.Second, Burst: 15 * time.Second}
	tests := []struct {
		name string
		p    Pattern
		at   time.Duration
		want float64
	}{
		{name: "start is steady", p: p, at: 0, want: 2},
		{name: "last steady instant", p: p, at: 30*time.Second - 1, want: 2},
		{name: "burst closes the period", p: p, at: 30 * time.Second, want: 8},
		{name: "last burst instant", p: p, at: 45*time.Second - 1, want: 8},
		{name: "next period steady", p: p, at: 45 * time.Second, want: 2},
		{name: "second burst", p: p, at: 80 * time.Second, want: 8},
		{name: "no burst length", p: Pattern{BaseQPS: 2, BurstQPS: 8, Steady: time.Minute}, at: 59 * time.Second, want: 2},
		{name: "zero pattern", p: Pattern{BaseQPS: 3}, at: time.Hour, want: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Rate(tt.at); got != tt.want {
				t.Errorf("%+v.Rate(%v) = %v, want %v", tt.p, tt.at, got, tt.want)
			}
		})
	}
}

func TestGap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, rate := range []float64{0, -1} {
		if g := Gap(rng, rate); g != math.MaxInt64 {
			t.Errorf("Gap(rate %v) = %v, want the longest Duration", rate, g)
		}
	}
	if g := Gap(rng, 1e-300); g != math.MaxInt64 {
		t.Errorf("Gap(rate 1e-300) = %v, want the longest Duration, not an overflow", g)
	}
	var sum time.Duration
	const n = 20000
	for range n {
		sum += Gap(rng, 100)
	}
	if mean := sum / n; mean < 9*time.Millisecond || mean > 11*time.Millisecond {
		t.Errorf("mean Gap at 100/s = %v, want about 10ms", mean)
	}
}

// TestArrivals: over many periods the arrivals in each phase come at that
// phase's rate, in time order.
func TestArrivals(t *testing.T) {
	tests := []struct {
		name string
		p    Pattern
	}{
		{name: "bursts above the base", p: Pattern{BaseQPS: 10, BurstQPS: 40, Steady: 20 * time.Second, Burst: 10 * time.Second}},
		{name: "lulls below the base", p: Pattern{BaseQPS: 40, BurstQPS: 5, Steady: 10 * time.Second, Burst: 10 * time.Second}},
		{name: "steady only", p: Pattern{BaseQPS: 25, BurstQPS: 80, Steady: time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewArrivals(tt.p, rand.New(rand.NewPCG(7, 8)))
			const horizon = time.Hour
			var n [2]float64     // arrivals in steady, in burst
			var spent [2]float64 // seconds of each phase within the horizon
			period := tt.p.Steady + tt.p.Burst
			spent[0] = horizon.Seconds() * tt.p.Steady.Seconds() / period.Seconds()
			spent[1] = horizon.Seconds() - spent[0]
			last := time.Duration(0)
			for at := a.Next(); at < horizon; at = a.Next() {
				if at < last {
					t.Fatalf("arrival at %v after one at %v", at, last)
				}
				last = at
				if tt.p.Rate(at) == tt.p.BurstQPS && at%period >= tt.p.Steady {
					n[1]++
				} else {
					n[0]++
				}
			}
			for i, want := range []float64{tt.p.BaseQPS, tt.p.BurstQPS} {
				if spent[i] == 0 {
					continue
				}
				if got := n[i] / spent[i]; math.Abs(got-want) > 0.05*want {
					t.Errorf("phase %d: %.2f arrivals/s, want %v", i, got, want)
				}
			}
		})
	}
}

func TestArrivalsNoRate(t *testing.T) {
	a := NewArrivals(Pattern{Steady: time.Second, Burst: time.Second}, rand.New(rand.NewPCG(1, 1)))
	for range 2 {
		if at := a.Next(); at != math.MaxInt64 {
			t.Fatalf("Next() with no rate = %v, want the longest Duration", at)
		}
	}
}
