package pressure

import (
	"math"
	"testing"
	"time"
)

func TestRate(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		at     time.Duration
		v      float64
		want   float64
		wantOK bool
	}
	tests := []struct {
		name    string
		counter bool
		tau     time.Duration
		steps   []step
	}{
		{"counter, unsmoothed, with a reset", true, time.Nanosecond, []step{
			{0, 10, 0, false},
			{time.Second, 14, 4, true},
			{2 * time.Second, 2, 2, true}, // reset: the counter restarted from 0
			{3 * time.Second, 3, 1, true},
			{3 * time.Second, 9, 1, true}, // no time passed: previous rate kept
		}},
		{"gauge slope may fall", false, time.Nanosecond, []step{
			{0, 1.5, 0, false},
			{500 * time.Millisecond, 1.4, -0.2, true},
		}},
		{"smoothed: first slope as is, then EWMA", true, time.Second, []step{
			{0, 0, 0, false},
			{time.Second, 10, 10, true},
			{2 * time.Second, 10, 10 * math.Exp(-1), true}, // slope 0, weight 1−e^−1
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var r rate
			for i, st := range tt.steps {
				got, ok := r.add(st.v, t0.Add(st.at), tt.counter, tt.tau)
				if ok != st.wantOK || math.Abs(got-st.want) > 1e-9 {
					t.Fatalf("step %d: add(%v) = %v, %v, want %v, %v", i, st.v, got, ok, st.want, st.wantOK)
				}
			}
		})
	}
}

func TestDeriverForgetsMissingSeries(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := newDeriver(time.Nanosecond)
	in := func(frag, retries float64) Reading {
		return Reading{Counters: map[Signal]float64{PreemptionRate: retries},
			GPUs: []GPUReading{{ID: "0", Values: map[Signal]float64{Fragmentation: frag},
				Counters: map[Signal]float64{AllocRetryRate: retries}}}}
	}
	d.derive(in(1.0, 0), t0)
	out := d.derive(in(1.5, 5), t0.Add(time.Second))
	g := out.GPUs[0].Values
	if out.Values[PreemptionRate] != 5 || g[AllocRetryRate] != 5 || g[FragmentationGrowth] != 0.5 || out.GPUs[0].Counters != nil {
		t.Fatalf("derive() = %+v, want rates 5, 5 and growth 0.5, no counters", out)
	}
	d.derive(Reading{}, t0.Add(2*time.Second)) // every series missing
	out = d.derive(in(3, 100), t0.Add(3*time.Second))
	if _, ok := out.Values[PreemptionRate]; ok {
		t.Fatalf("derive() after a gap = %+v, want the rates to start over", out)
	}
}
