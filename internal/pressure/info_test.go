package pressure

import (
	"maps"
	"os"
	"slices"
	"testing"
	"time"
)

// TestSignalInfo proves what Info says of each signal against the parsers:
// a full reading of each kind (the testdata answers; a fake NVML device),
// taken twice and derived as the Monitor derives it, yields exactly the
// signals whose Kinds name that kind, per GPU where PerGPU says so, and the
// Rate signals only from the second reading on. docs/signals.md is
// generated from Info, so it cannot claim a source that does not yield a
// signal.
func TestSignalInfo(t *testing.T) {
	t.Parallel()
	file := func(parse func([]byte) (Reading, error), path string) func(t *testing.T) Reading {
		return func(t *testing.T) Reading {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			rd, err := parse(data)
			if err != nil {
				t.Fatalf("parse %s: %v", path, err)
			}
			return rd
		}
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	read := map[Kind]func(t *testing.T) Reading{
		KindVLLM:         file(ParseVLLMMetrics, "testdata/vllm-two-engines.txt"),
		KindDCGM:         file(ParseDCGMMetrics, "testdata/dcgm-two-gpus.txt"),
		KindMemoryBlocks: file(ParseMemoryBlocks, "testdata/memory-blocks.json"),
	}
	if nvml := nvmlReading(t0); nvml != nil { // only in the nvml build (go test -tags nvml)
		read[KindNVML] = nvml
	}
	for _, s := range Signals() {
		if s.Info().Unit == "" || len(s.Info().Kinds) == 0 {
			t.Errorf("%s.Info() = %+v, want a unit and at least one kind", s, s.Info())
		}
	}
	for kind, get := range read {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			d := newDeriver(time.Second)
			first := yielded(d.derive(get(t), t0))
			second := yielded(d.derive(get(t), t0.Add(time.Second)))
			wantFirst, wantSecond := map[Signal]bool{}, map[Signal]bool{}
			for _, s := range Signals() {
				if info := s.Info(); slices.Contains(info.Kinds, kind) {
					wantSecond[s] = info.PerGPU
					if !info.Rate {
						wantFirst[s] = info.PerGPU
					}
				}
			}
			if !maps.Equal(first, wantFirst) {
				t.Errorf("first %s reading yields %v (signal: per GPU), want %v", kind, first, wantFirst)
			}
			if !maps.Equal(second, wantSecond) {
				t.Errorf("second %s reading yields %v (signal: per GPU), want %v", kind, second, wantSecond)
			}
		})
	}
}

// yielded maps each signal of rd to whether it came per GPU.
func yielded(rd Reading) map[Signal]bool {
	out := map[Signal]bool{}
	for s := range rd.Values {
		out[s] = false
	}
	for _, g := range rd.GPUs {
		for s := range g.Values {
			out[s] = true
		}
	}
	return out
}
