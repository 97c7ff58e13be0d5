package traffic

import (
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	ten := func() []time.Duration { // 10, 9, …, 1 ms: unsorted
		ds := make([]time.Duration, 10)
		for i := range ds {
			ds[i] = time.Duration(10-i) * time.Millisecond
		}
		return ds
	}
	tests := []struct {
		name string
		ds   []time.Duration
		q    float64
		want time.Duration
	}{
		{name: "empty", ds: nil, q: 0.5, want: 0},
		{name: "one value", ds: []time.Duration{3}, q: 0.99, want: 3},
		{name: "median of ten", ds: ten(), q: 0.5, want: 5 * time.Millisecond},
		{name: "p90 of ten", ds: ten(), q: 0.9, want: 9 * time.Millisecond},
		{name: "p99 of ten is the largest", ds: ten(), q: 0.99, want: 10 * time.Millisecond},
		{name: "q 0 is the smallest", ds: ten(), q: 0, want: time.Millisecond},
		{name: "q 1 is the largest", ds: ten(), q: 1, want: 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Quantile(tt.ds, tt.q); got != tt.want {
				t.Errorf("Quantile(%v, %v) = %v, want %v", tt.ds, tt.q, got, tt.want)
			}
		})
	}
}
