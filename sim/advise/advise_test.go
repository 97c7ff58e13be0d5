package advise

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim"
	"github.com/gatekeeper-dev/gatekeeper/sim/replay"
)

func preset(t *testing.T, gpus ...string) []sim.GPU {
	t.Helper()
	var gs []sim.GPU
	for _, n := range gpus {
		g, err := sim.GPUByName(n)
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	return gs
}

func model(t *testing.T, name string) sim.Model {
	t.Helper()
	m, err := sim.ModelByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// tiny is a grid that runs in a second or two: two GPUs, two
// utilizations, three virtual minutes at a few QPS with one burst.
func tiny(t *testing.T) Settings {
	return Settings{
		Model:        model(t, ""),
		GPUs:         preset(t, "A10G", "H100-80G"),
		Utilizations: []float64{0.85, 0.9},
		Traffic:      Traffic{SteadyQPS: 20, BurstQPS: 30, BurstEvery: 3 * time.Minute, BurstLength: time.Minute},
		Horizon:      3 * time.Minute,
		Seed:         101,
		MaxPods:      16,
	}
}

func TestTinyGridTable(t *testing.T) {
	var lines []string
	s := tiny(t)
	s.Progress = func(p Progress) {
		if p.Total != 4 || p.Done < 1 || p.Done > 4 || p.ETA < 0 {
			t.Errorf("progress %+v", p)
		}
		lines = append(lines, p.Point.GPU)
	}
	r, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 4 || len(r.Points) != 4 || len(r.Best) != 2 {
		t.Fatalf("%d progress lines, %d points, %d best; want 4, 4, 2", len(lines), len(r.Points), len(r.Best))
	}
	// The figures this grid gives (they change only with the model or the
	// replay, on purpose).
	want := []struct {
		gpu  string
		util float64
		seqs int
		pods int
	}{
		{"A10G", 0.85, 256, 5}, {"A10G", 0.9, 256, 5}, {"H100-80G", 0.85, 1024, 1}, {"H100-80G", 0.9, 1024, 1},
	}
	for i, w := range want {
		p := r.Points[i]
		if p.GPU != w.gpu || p.GPUMemoryUtilization != w.util || p.MaxNumSeqs != w.seqs || p.Pods != w.pods || !p.Met || !p.Fits {
			t.Errorf("point %d = %s %.2f %d: %d pods (met %v); want %s %.2f %d: %d pods", i, p.GPU, p.GPUMemoryUtilization, p.MaxNumSeqs,
				p.Pods, p.Met, w.gpu, w.util, w.seqs, w.pods)
		}
		if p.SLOAttainment < s.withDefaults().SLOTarget || p.OOMs != 0 || p.Runs < 1 || p.KVCacheBytes <= 0 ||
			!(p.EffectiveMemoryUse > 0 && p.EffectiveMemoryUse <= 1) || p.Headroom != 1-p.GPUMemoryUtilization {
			t.Errorf("point %d: %+v", i, p)
		}
	}
	var b bytes.Buffer
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"| A10G 24 GiB |", "| H100-80G 80 GiB |", "SLO target 99.0 %", "seed 101"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, b.String())
		}
	}
}

func TestDeterministic(t *testing.T) {
	var out [2]bytes.Buffer
	for i := range out {
		s := tiny(t)
		s.GPUs = s.GPUs[:1]
		s.Parallel = 1 + i // the order the points finish in changes nothing
		r, err := Run(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteJSON(&out[i], r); err != nil {
			t.Fatal(err)
		}
	}
	if out[0].String() != out[1].String() {
		t.Fatalf("two runs of the same settings differ:\n%s\n%s", out[0].String(), out[1].String())
	}
}

func TestModelThatDoesNotFit(t *testing.T) {
	s := tiny(t)
	s.Model = model(t, "llama-2-13b") // 26 GB of weights on a 24 GiB A10G
	s.GPUs = preset(t, "A10G")
	r, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(r.Points, r.Best...) {
		if p.Fits || p.Met || p.Runs != 0 || !strings.Contains(p.NotFit, "no room for a KV cache") {
			t.Errorf("%+v, want a point that does not fit", p)
		}
	}
	// Llama-3.1-8B's 128k context does not fit an A10G's KV cache: vLLM's
	// other start-up check.
	s.Model = model(t, "llama-3.1-8b")
	s.Utilizations = []float64{0.9}
	if r, err = Run(s); err != nil {
		t.Fatal(err)
	}
	if p := r.Points[0]; p.Fits || !strings.Contains(p.NotFit, "max_model_len 131072") {
		t.Errorf("%+v, want the max_model_len check", p)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, r); err != nil || !strings.Contains(b.String(), "does not fit") {
		t.Errorf("table (%v):\n%s", err, b.String())
	}
}

func TestSettingsErrors(t *testing.T) {
	for name, mod := range map[string]func(*Settings){
		"no GPUs":            func(s *Settings) { s.GPUs = nil },
		"no model":           func(s *Settings) { s.Model = sim.Model{} },
		"utilization 0":      func(s *Settings) { s.Utilizations = []float64{0} },
		"utilization > 1":    func(s *Settings) { s.Utilizations = []float64{1.2} },
		"no utilization":     func(s *Settings) { s.Utilizations = []float64{} },
		"negative seqs":      func(s *Settings) { s.MaxNumSeqs = []int{-1} },
		"no traffic":         func(s *Settings) { s.Traffic.SteadyQPS = 0 },
		"burst too long":     func(s *Settings) { s.Traffic.BurstLength = time.Hour },
		"horizon holds none": func(s *Settings) { s.Horizon = time.Minute },
		"target above 1":     func(s *Settings) { s.SLOTarget = 1.5 },
		"negative OOMs":      func(s *Settings) { s.MaxOOMs = -1 },
		"negative max pods":  func(s *Settings) { s.MaxPods = -1 },
		"negative parallel":  func(s *Settings) { s.Parallel = -2 },
		"negative horizon":   func(s *Settings) { s.Horizon = -time.Minute },
		"longer than context": func(s *Settings) {
			s.Traffic.Classes = []replay.Class{{Name: "long", Weight: 1, Prompt: replay.Range{Min: 8000, Max: 9000},
				Output: replay.Range{Min: 1, Max: 10}, MaxTokens: 10}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := tiny(t)
			mod(&s)
			if _, err := Run(s); err == nil {
				t.Fatal("Run = nil error, want one")
			}
		})
	}
}

func TestBetter(t *testing.T) {
	met := func(pods int, util float64) Point {
		return Point{Fits: true, Met: true, Pods: pods, GPUMemoryUtilization: util, Headroom: 1 - util}
	}
	tests := []struct {
		name string
		a, b Point
	}{
		{"met before not met", met(9, 0.9), Point{Fits: true}},
		{"fits before does not", Point{Fits: true}, Point{}},
		{"fewer pods", met(2, 0.9), met(3, 0.75)},
		{"more headroom", met(2, 0.8), met(2, 0.9)},
		{"fewer OOMs", Point{Fits: true, Met: true, Pods: 2}, Point{Fits: true, Met: true, Pods: 2, OOMs: 1}},
	}
	for _, tt := range tests {
		if better(tt.a, tt.b) >= 0 || better(tt.b, tt.a) <= 0 {
			t.Errorf("%s: better(%+v, %+v) does not order them", tt.name, tt.a, tt.b)
		}
	}
}
