package pressure

import (
	"encoding/json"
	"math"
	"os"
	"testing"
)

// goldenPath is the JSON the PyTorch exporter serves for its fixed two-GPU
// scenario (exporters/pytorch/tests/scenario.py); the exporter's Python
// tests write and check the same file, so the two sides cannot drift.
const goldenPath = "../../exporters/pytorch/testdata/memory_blocks.golden.json"

// TestGoldenMemoryBlocks parses the exporter's golden answer and checks each
// GPU's signals against the scenario's sizes, worked out here by hand (MiB).
func TestGoldenMemoryBlocks(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatalf("ReadFile(%s) = %v", goldenPath, err)
	}
	rd, err := ParseMemoryBlocks(data)
	if err != nil {
		t.Fatalf("ParseMemoryBlocks(golden) = %v", err)
	}
	const gib = 1024.0 // MiB
	tests := []struct {
		id      string
		values  map[Signal]float64
		retries float64
	}{
		{
			// Healthy: driver free 8 GiB + wholly free segments 2 + 1.5 GiB
			// in one piece; stranded: 512 MiB + 1 MiB in split segments. The
			// CUDA-graph pool's 600 MiB counts as neither.
			id: "0",
			values: map[Signal]float64{
				Fragmentation:        (11.5*gib + 513) / (11.5 * gib),
				MemoryUsed:           72.0 / 80,
				EffectiveUtilization: (64*gib + 512 + 400 + 1) / (68.5*gib + 1000 + 2),
				FreeMemory:           (11.5*gib + 513) * (1 << 20),
			},
		},
		{
			// Stranded: driver free 2 GiB + one wholly free 512 MiB segment in
			// one piece; 8 × 640 MiB in holes of at most 256 MiB.
			id: "1",
			values: map[Signal]float64{
				Fragmentation:        (2.5*gib + 8*640) / (2.5 * gib),
				MemoryUsed:           78.0 / 80,
				FreeMemory:           (2.5*gib + 8*640) * (1 << 20),
				EffectiveUtilization: (60*gib + 8*384) / (68.5 * gib),
			},
			retries: 3,
		},
	}
	if len(rd.GPUs) != len(tests) {
		t.Fatalf("ParseMemoryBlocks(golden) has %d GPUs, want %d", len(rd.GPUs), len(tests))
	}
	for i, tt := range tests {
		t.Run("gpu"+tt.id, func(t *testing.T) {
			g := rd.GPUs[i]
			if g.ID != tt.id {
				t.Fatalf("GPUs[%d].ID = %q, want %q", i, g.ID, tt.id)
			}
			if len(g.Values) != len(tt.values) {
				t.Errorf("Values = %v, want exactly the signals %v", g.Values, tt.values)
			}
			for sig, want := range tt.values {
				if got, ok := g.Values[sig]; !ok || math.Abs(got-want) > 1e-9 {
					t.Errorf("Values[%s] = %v (present %v), want %v", sig, got, ok, want)
				}
			}
			if got := g.Counters[AllocRetryRate]; got != tt.retries {
				t.Errorf("Counters[%s] = %v, want %v", AllocRetryRate, got, tt.retries)
			}
		})
	}
	// The scenario is meant to straddle the default rule (degrade 1.2, shed 1.5).
	if f := rd.GPUs[0].Values[Fragmentation]; f >= 1.2 {
		t.Errorf("healthy GPU's fragmentation = %v, want < 1.2", f)
	}
	if f := rd.GPUs[1].Values[Fragmentation]; f <= 1.5 {
		t.Errorf("stranded GPU's fragmentation = %v, want > 1.5", f)
	}
}

// TestGoldenClassicRatio checks that the golden file's fragmentation_ratio
// (largest ÷ free, what vllm_gpu_memory_fragmentation exports) is the
// inverse of the byte counts the parser prefers, to the 6 digits served.
func TestGoldenClassicRatio(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatalf("ReadFile(%s) = %v", goldenPath, err)
	}
	var doc struct {
		MemoryBlocks []struct {
			GPUID   string  `json:"gpu_id"`
			Free    float64 `json:"free_bytes"`
			Largest float64 `json:"largest_free_block_bytes"`
			Ratio   float64 `json:"fragmentation_ratio"`
		} `json:"memory_blocks"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("Unmarshal(golden) = %v", err)
	}
	for _, b := range doc.MemoryBlocks {
		if want := b.Largest / b.Free; math.Abs(b.Ratio-want) > 5e-7 {
			t.Errorf("gpu %s: fragmentation_ratio = %v, want largest ÷ free = %v", b.GPUID, b.Ratio, want)
		}
	}
}
