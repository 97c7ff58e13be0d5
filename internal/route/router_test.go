package route

import (
	"math"
	"strings"
	"testing"
)

func TestBlocksChainAndSeed(t *testing.T) {
	t.Parallel()
	system := strings.Repeat("You are a helpful assistant. ", 10) // 290 characters: 4 whole blocks
	a := Blocks(nil, "m", []byte(system+"What is Go?"))
	b := Blocks(nil, "m", []byte(system+"Name a prime."))
	if len(a) != 4 || len(b) != 4 {
		t.Fatalf("blocks: %d and %d, want 4 (whole blocks of %d characters only)", len(a), len(b), BlockChars)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("block %d differs for a shared prefix", i)
		}
	}
	if c := Blocks(nil, "other", []byte(system)); c[0] == a[0] {
		t.Fatal("two models share a block hash")
	}
	// A change in block 0 changes every hash after it (chained).
	d := Blocks(nil, "m", []byte("X"+system[1:]))
	for i := range d {
		if d[i] == a[i] {
			t.Fatalf("block %d unchanged after block 0 changed", i)
		}
	}
	if n := len(Blocks(nil, "m", []byte(strings.Repeat("x", BlockChars*(MaxBlocks+5))))); n != MaxBlocks {
		t.Fatalf("blocks of a long prompt: %d, want %d", n, MaxBlocks)
	}
}

func TestScoreSteps(t *testing.T) {
	t.Parallel()
	r, err := New(Settings{Weights: Weights{Prefix: 3, Load: 2, KV: 2, Memory: 2}, Capacity: 8})
	if err != nil {
		t.Fatal(err)
	}
	p := Blocks(nil, "m", []byte(strings.Repeat("abcd", 16*4))) // 4 blocks
	steps := []struct {
		do   func()
		pod  string
		in   int
		want Values
	}{
		{do: func() {}, pod: "a", in: 0, want: Values{Prefix: 0, Load: 1, KV: 0.5, Memory: 0.5, Total: (2 + 1 + 1) / 9.0}},
		{do: func() { r.Chose("a", p) }, pod: "a", in: 1, want: Values{Prefix: 1, Load: 0.9, KV: 0.5, Memory: 0.5, Total: (3 + 1.8 + 1 + 1) / 9.0}},
		{do: func() { r.SetPod("a", Pod{Waiting: 2, KVUsage: 0.75, Memory: 0.25}) }, pod: "a", in: 1,
			want: Values{Prefix: 1, Load: 0.7, KV: 0.25, Memory: 0.25, Total: (3 + 1.4 + 0.5 + 0.5) / 9.0}},
		{do: func() {}, pod: "b", in: 0, want: Values{Prefix: 0, Load: 1, KV: 0.5, Memory: 0.5, Total: 4 / 9.0}},
		// Capacity 8: ten other blocks age a's prefix out.
		{do: func() { r.Chose("a", Blocks(nil, "m", []byte(strings.Repeat("zyxw", 16*10)))) }, pod: "a", in: 1,
			want: Values{Prefix: 0, Load: 0.7, KV: 0.25, Memory: 0.25, Total: (1.4 + 0.5 + 0.5) / 9.0}},
		{do: func() { r.Chose("a", p); r.Forget("a") }, pod: "a", in: 0, want: Values{Load: 1, KV: 0.5, Memory: 0.5, Total: 4 / 9.0}},
	}
	for i, s := range steps {
		s.do()
		got := r.Explain(s.pod, s.in, 10, p)
		if !near(got, s.want) {
			t.Fatalf("step %d: %+v, want %+v", i, got, s.want)
		}
	}
}

func TestMatchStopsAtFirstMiss(t *testing.T) {
	t.Parallel()
	r, _ := New(Settings{Weights: Weights{Prefix: 1}})
	shared := strings.Repeat("s", BlockChars*2)
	r.Chose("a", Blocks(nil, "m", []byte(shared+strings.Repeat("a", BlockChars*2))))
	got := r.Explain("a", 0, 1, Blocks(nil, "m", []byte(shared+strings.Repeat("b", BlockChars*2))))
	if got.Prefix != 0.5 {
		t.Fatalf("prefix %v, want 0.5 (2 of 4 leading blocks)", got.Prefix)
	}
}

func TestMemoryHeadroom(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ratio      float64
		free, need int64
		want       float64
	}{
		{1, 0, 0, 1}, {1.25, 0, 0, 0.5}, {1.6, 0, 0, 0}, {math.NaN(), 100, 25, 0.75},
		{1, 100, 50, 0.5}, {1.4, 100, 10, 0.2}, {math.NaN(), 0, 0, math.NaN()},
	} {
		got := MemoryHeadroom(c.ratio, 1.5, c.free, c.need)
		if !(got == c.want || math.Abs(got-c.want) < 1e-9 || math.IsNaN(got) && math.IsNaN(c.want)) {
			t.Errorf("MemoryHeadroom(%v, 1.5, %d, %d) = %v, want %v", c.ratio, c.free, c.need, got, c.want)
		}
	}
}

func TestNewRefusesBadSettings(t *testing.T) {
	t.Parallel()
	for _, s := range []Settings{{Weights: Weights{Prefix: -1}}, {Weights: Weights{KV: math.NaN()}}, {Capacity: -1}} {
		if _, err := New(s); err == nil {
			t.Errorf("New(%+v) = nil error", s)
		}
	}
}

func near(a, b Values) bool {
	for _, d := range []float64{a.Prefix - b.Prefix, a.Load - b.Load, a.KV - b.KV, a.Memory - b.Memory, a.Total - b.Total} {
		if math.Abs(d) > 1e-9 {
			return false
		}
	}
	return true
}

func TestChoseCountsHitsAndMisses(t *testing.T) {
	t.Parallel()
	r, _ := New(Settings{Weights: Weights{Prefix: 1}})
	shared := strings.Repeat("s", BlockChars*3)
	steps := []struct {
		pod       string
		text      string
		hit, miss uint64
	}{
		{"a", shared + strings.Repeat("a", BlockChars), 0, 4},
		{"a", shared + strings.Repeat("b", BlockChars), 3, 5}, // the shared 3 blocks hit
		{"b", shared, 3, 8}, // another pod holds nothing
	}
	for i, s := range steps {
		r.Chose(s.pod, Blocks(nil, "m", []byte(s.text)))
		if hit, miss := r.Counted(); hit != s.hit || miss != s.miss {
			t.Fatalf("step %d: Counted() = %d, %d; want %d, %d", i, hit, miss, s.hit, s.miss)
		}
	}
	if _, ok := r.PodState("c"); ok {
		t.Error("PodState of a pod never seen: known")
	}
	r.SetPod("a", Pod{Waiting: 1, KVUsage: 0.5, Memory: 0.25})
	if p, ok := r.PodState("a"); !ok || p != (Pod{Waiting: 1, KVUsage: 0.5, Memory: 0.25}) {
		t.Errorf("PodState(a) = %+v, %v", p, ok)
	}
}
