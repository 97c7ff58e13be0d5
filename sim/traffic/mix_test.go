package traffic

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestRangeAndClassValid(t *testing.T) {
	ok := Class{Name: "x", Weight: 1, Prompt: Range{Min: 1, Max: 10}, Output: Range{Min: 2, Max: 5}, MaxTokens: 5}
	tests := []struct {
		name string
		c    Class
		want bool
	}{
		{name: "valid", c: ok, want: true},
		{name: "one-count ranges", c: Class{Weight: 0.1, Prompt: Range{Min: 7, Max: 7}, Output: Range{Min: 1, Max: 1}, MaxTokens: 1}, want: true},
		{name: "zero weight", c: func() Class { c := ok; c.Weight = 0; return c }()},
		{name: "prompt from 0", c: func() Class { c := ok; c.Prompt.Min = 0; return c }()},
		{name: "output max below min", c: func() Class { c := ok; c.Output = Range{Min: 3, Max: 2}; return c }()},
		{name: "max tokens below output", c: func() Class { c := ok; c.MaxTokens = 4; return c }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.Valid(); got != tt.want {
				t.Errorf("%+v.Valid() = %v, want %v", tt.c, got, tt.want)
			}
		})
	}
}

func TestRangeDraw(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	r := Range{Min: 3, Max: 6}
	seen := map[int]int{}
	for range 4000 {
		n := r.Draw(rng)
		if n < r.Min || n > r.Max {
			t.Fatalf("%+v.Draw() = %d, outside the range", r, n)
		}
		seen[n]++
	}
	for n := r.Min; n <= r.Max; n++ {
		if seen[n] < 800 { // 1 000 expected each
			t.Errorf("%+v drew %d %d times in 4 000, want about 1 000", r, n, seen[n])
		}
	}
}

func TestMixPick(t *testing.T) {
	tests := []struct {
		name string
		mix  Mix
		want []float64 // share of each class
	}{
		{name: "one class", mix: Mix{{Weight: 0.3}}, want: []float64{1}},
		{name: "weights relative", mix: Mix{{Weight: 3}, {Weight: 1}}, want: []float64{0.75, 0.25}},
		{name: "three classes", mix: Mix{{Weight: 0.15}, {Weight: 0.85}, {Weight: 1}}, want: []float64{0.075, 0.425, 0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng, twin := rand.New(rand.NewPCG(5, 6)), rand.New(rand.NewPCG(5, 6))
			const n = 40000
			got := make([]float64, len(tt.mix))
			for range n {
				got[tt.mix.Pick(rng)]++
				twin.Float64() // Pick takes exactly one Float64
			}
			if rng.Uint64() != twin.Uint64() {
				t.Fatalf("Pick took other than one Float64 per call")
			}
			for i := range got {
				if share := got[i] / n; math.Abs(share-tt.want[i]) > 0.01 {
					t.Errorf("class %d drawn %.3f of the time, want %.3f", i, share, tt.want[i])
				}
			}
		})
	}
}
