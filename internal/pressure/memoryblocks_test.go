package pressure

import (
	"errors"
	"math"
	"testing"
)

func TestParseMemoryBlocks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		in           string
		want         []GPUReading // Values and Counters compared
		wantErr      error        // nil: any error when wantAnyErr
		wantAnyError bool
	}{
		{name: "design example", in: string(testdata(t, "memory-blocks.json")), want: []GPUReading{{
			ID: "0",
			Values: sv{Fragmentation: 17179869184.0 / 11453246122, MemoryUsed: 0.8,
				EffectiveUtilization: 51539607552.0 / 60129542144, FreeMemory: 17179869184},
			Counters: sv{AllocRetryRate: 4},
		}}},
		{name: "array, numeric ids, ratio only", in: `[{"gpu_id": 1, "fragmentation_ratio": 0.5},{"gpu_id": 0, "fragmentation_ratio": 1.02}]`,
			want: []GPUReading{{ID: "0", Values: sv{Fragmentation: 1}}, {ID: "1", Values: sv{Fragmentation: 2}}}},
		{name: "memory_blocks holds one object", in: `{"memory_blocks": {"gpu_id": "3", "free_bytes": 0, "largest_free_block_bytes": 0}}`,
			want: []GPUReading{{ID: "3", Values: sv{Fragmentation: 1, FreeMemory: 0}}}},
		{name: "single block at top level, no gpu_id, unknown fields", in: `{"total_bytes": 100, "used_bytes": 25, "extra": {"x": [1]}}`,
			want: []GPUReading{{ID: "0", Values: sv{MemoryUsed: 0.25}}}},
		{name: "bytes beat the reported ratio; largest above free clamps to 1", in: `[{"free_bytes": 10, "largest_free_block_bytes": 20, "fragmentation_ratio": 0.1}]`,
			want: []GPUReading{{ID: "0", Values: sv{Fragmentation: 1, FreeMemory: 10}}}},
		{name: "missing, negative and inconsistent fields are absent", in: `[{"free_bytes": 10, "largest_free_block_bytes": 0, "fragmentation_ratio": 0,
			"used_bytes": -1, "total_bytes": 10, "reserved_bytes": 0, "allocated_bytes": 0, "alloc_retry_count": -3}]`,
			want: []GPUReading{{ID: "0", Values: sv{FreeMemory: 10}}}},
		{name: "positions name blocks without gpu_id", in: `{"memory_blocks": [{"fragmentation_ratio": 1}, {"gpu_id": "", "fragmentation_ratio": 0.25}]}`,
			want: []GPUReading{{ID: "0", Values: sv{Fragmentation: 1}}, {ID: "1", Values: sv{Fragmentation: 4}}}},
		{name: "empty array", in: `[]`, wantErr: errNoMemoryBlocks},
		{name: "empty object", in: `{}`, wantErr: errNoMemoryBlocks},
		{name: "null", in: `null`, wantErr: errNoMemoryBlocks},
		{name: "not json", in: `<html>`, wantAnyError: true},
		{name: "bad gpu_id", in: `[{"gpu_id": 1.5}]`, wantAnyError: true},
		{name: "wrong field type", in: `{"memory_blocks": [{"free_bytes": "lots"}]}`, wantAnyError: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rd, err := ParseMemoryBlocks([]byte(tt.in))
			switch {
			case tt.wantErr != nil || tt.wantAnyError:
				if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
					t.Fatalf("ParseMemoryBlocks(%s) error = %v, want %v", tt.in, err, tt.wantErr)
				}
				return
			case err != nil:
				t.Fatalf("ParseMemoryBlocks(%s) error = %v", tt.in, err)
			}
			if len(rd.GPUs) != len(tt.want) {
				t.Fatalf("ParseMemoryBlocks(%s).GPUs = %+v, want %+v", tt.in, rd.GPUs, tt.want)
			}
			for i, g := range rd.GPUs {
				w := tt.want[i]
				if g.ID != w.ID || !approxEqual(g.Values, w.Values) || !approxEqual(g.Counters, w.Counters) {
					t.Errorf("ParseMemoryBlocks(%s).GPUs[%d] = %+v, want %+v", tt.in, i, g, w)
				}
			}
		})
	}
}

func FuzzParseMemoryBlocks(f *testing.F) {
	f.Add(testdata(f, "memory-blocks.json"))
	f.Add([]byte(`[{"gpu_id": 1, "fragmentation_ratio": 0.5}]`))
	f.Add([]byte(`{"memory_blocks": {"gpu_id": "3", "free_bytes": 0, "largest_free_block_bytes": 1e308}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rd, err := ParseMemoryBlocks(data)
		if err != nil {
			return
		}
		if len(rd.GPUs) == 0 {
			t.Fatal("ParseMemoryBlocks accepted an answer without GPUs")
		}
		for _, g := range rd.GPUs {
			for sig, v := range g.Values {
				if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
					t.Fatalf("ParseMemoryBlocks: gpu %q %v = %v", g.ID, sig, v)
				}
			}
			if f, ok := g.Values[Fragmentation]; ok && f < 1 {
				t.Fatalf("ParseMemoryBlocks: fragmentation %v < 1", f)
			}
		}
	})
}
