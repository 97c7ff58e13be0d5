package pressure

import (
	"encoding/json"
	"errors"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fixture returns a shared capture, skipping the test when the shared
// fixtures folder is absent.
func fixture(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "shared", "fixtures", name))
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("fixture %s absent", name)
	}
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func testdata(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

type sv = map[Signal]float64

func TestParseVLLMMetrics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		shared       bool // a capture in ../../../shared/fixtures, else testdata
		file         string
		wantValues   sv
		wantCounters sv
	}{
		{"v1 capture idle", true, "vllm-metrics-v1.txt",
			sv{KVCacheUsage: 0, Running: 0, Waiting: 0}, sv{PreemptionRate: 0}},
		{"v1 0.10 both usage names", true, "vllm-metrics-v1-reconstructed-0.10.txt",
			sv{KVCacheUsage: 0.8125, Running: 7, Waiting: 3}, sv{PreemptionRate: 2}},
		{"v0 gpu_cache_usage_perc", true, "vllm-metrics-v0-reconstructed.txt",
			sv{KVCacheUsage: 0.9375, Running: 12, Waiting: 5}, sv{PreemptionRate: 4}},
		{"llm-d sim idle", true, "llmd-sim-metrics-idle.txt",
			sv{KVCacheUsage: 0, Running: 0, Waiting: 0}, sv{}},
		{"llm-d sim under load", true, "llmd-sim-metrics-under-load.txt",
			sv{KVCacheUsage: 0, Running: 4, Waiting: 4}, sv{}},
		{"llm-d sim after", true, "llmd-sim-metrics-after.txt",
			sv{KVCacheUsage: 0, Running: 0, Waiting: 0}, sv{}},
		{"llm-d sim fake", true, "llmd-sim-metrics-fake.txt",
			sv{KVCacheUsage: 0.93, Running: 7, Waiting: 3}, sv{}},
		{"llm-d sim kv load", true, "llmd-sim-metrics-kv-load.txt",
			sv{KVCacheUsage: 0.75, Running: 4, Waiting: 2}, sv{}},
		{"two engines: max usage, summed counts", false, "vllm-two-engines.txt",
			sv{KVCacheUsage: 0.75, Running: 7, Waiting: 3}, sv{PreemptionRate: 11}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data := testdataOrFixture(t, tt.shared, tt.file)
			rd, err := ParseVLLMMetrics(data)
			if err != nil {
				t.Fatalf("ParseVLLMMetrics() error = %v", err)
			}
			if !maps.Equal(rd.Values, tt.wantValues) {
				t.Errorf("ParseVLLMMetrics().Values = %v, want %v", rd.Values, tt.wantValues)
			}
			if !maps.Equal(rd.Counters, tt.wantCounters) {
				t.Errorf("ParseVLLMMetrics().Counters = %v, want %v", rd.Counters, tt.wantCounters)
			}
			if len(rd.GPUs) != 0 {
				t.Errorf("ParseVLLMMetrics().GPUs = %v, want none", rd.GPUs)
			}
		})
	}
}

func testdataOrFixture(t testing.TB, shared bool, name string) []byte {
	t.Helper()
	if shared {
		return fixture(t, name)
	}
	return testdata(t, name)
}

func TestParseMetricsWithoutOurs(t *testing.T) {
	t.Parallel()
	if _, err := ParseVLLMMetrics(testdata(t, "dcgm-two-gpus.txt")); !errors.Is(err, ErrNoMetrics) {
		t.Errorf("ParseVLLMMetrics(dcgm scrape) = %v, want ErrNoMetrics", err)
	}
	if _, err := ParseDCGMMetrics(fixture(t, "vllm-metrics-v1.txt")); !errors.Is(err, ErrNoMetrics) {
		t.Errorf("ParseDCGMMetrics(vllm scrape) = %v, want ErrNoMetrics", err)
	}
}

func TestParseVLLMMetricsErrors(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"vllm:num_requests_waiting{engine=\"0\" 3\n",
		"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 1\nvllm:num_requests_waiting 2\n# TYPE vllm:num_requests_waiting gauge\n",
	} {
		if _, err := ParseVLLMMetrics([]byte(in)); err == nil || !strings.HasPrefix(err.Error(), "pressure: ") {
			t.Errorf("ParseVLLMMetrics(%q) error = %v, want a pressure: error", in, err)
		}
	}
}

func FuzzParseVLLMMetrics(f *testing.F) {
	for _, name := range []string{"vllm-two-engines.txt", "dcgm-two-gpus.txt"} {
		f.Add(testdata(f, name))
	}
	f.Add([]byte("vllm:kv_cache_usage_perc NaN\nvllm:num_requests_waiting{engine=\"0\"} +Inf\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFilterKeepsFamilies(t, data, vllmFamilies)
		rd, err := ParseVLLMMetrics(data)
		if err != nil {
			return
		}
		for sig, v := range rd.Values {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("ParseVLLMMetrics accepted %v = %v", sig, v)
			}
		}
	})
}

func BenchmarkParseVLLMMetrics(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "shared", "fixtures", "vllm-metrics-v1.txt"))
	if err != nil {
		data = testdata(b, "vllm-two-engines.txt")
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseVLLMMetrics(data); err != nil {
			b.Fatal(err)
		}
	}
}

func TestParseDCGMMetrics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		shared bool
		data   string // inline when file is empty
		file   string
		want   []GPUReading
	}{
		{name: "L4 capture, Hostname", shared: true, file: "dcgm-exporter.txt", want: []GPUReading{{
			ID: "0", UUID: "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c", Name: "NVIDIA L4",
			host: "i-030791dc5a37cd257", Values: sv{MemoryUsed: 470.0 / 23033},
		}}},
		{name: "two GPUs, hostname", file: "dcgm-two-gpus.txt", want: []GPUReading{
			{ID: "0", UUID: "GPU-aaa", Name: "NVIDIA H100 80GB HBM3", host: "node-1", Values: sv{MemoryUsed: 0.9}},
			{ID: "1", UUID: "GPU-bbb", Name: "NVIDIA H100 80GB HBM3", host: "node-1", Values: sv{MemoryUsed: 0.5}},
		}},
		{name: "no reserved field, MIG instances summed", data: `DCGM_FI_DEV_FB_USED{gpu="10",GPU_I_ID="1"} 10
DCGM_FI_DEV_FB_USED{gpu="10",GPU_I_ID="2"} 20
DCGM_FI_DEV_FB_FREE{gpu="10",GPU_I_ID="1"} 30
DCGM_FI_DEV_FB_FREE{gpu="10",GPU_I_ID="2"} 40
DCGM_FI_DEV_FB_USED{gpu="2"} 1
`, want: []GPUReading{
			{ID: "2", Values: sv{}}, // FB_FREE missing: memory_used absent
			{ID: "10", Values: sv{MemoryUsed: 0.3}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data := []byte(tt.data)
			if tt.file != "" {
				data = testdataOrFixture(t, tt.shared, tt.file)
			}
			rd, err := ParseDCGMMetrics(data)
			if err != nil {
				t.Fatalf("ParseDCGMMetrics() error = %v", err)
			}
			if len(rd.GPUs) != len(tt.want) {
				t.Fatalf("ParseDCGMMetrics().GPUs = %+v, want %+v", rd.GPUs, tt.want)
			}
			for i, g := range rd.GPUs {
				w := tt.want[i]
				if g.ID != w.ID || g.UUID != w.UUID || g.Name != w.Name || g.host != w.host || !approxEqual(g.Values, w.Values) {
					t.Errorf("ParseDCGMMetrics().GPUs[%d] = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func approxEqual(a, b sv) bool {
	return maps.EqualFunc(a, b, func(x, y float64) bool { return math.Abs(x-y) < 1e-9 })
}

func FuzzParseDCGMMetrics(f *testing.F) {
	f.Add(testdata(f, "dcgm-two-gpus.txt"))
	f.Add([]byte("DCGM_FI_DEV_FB_USED{gpu=\"0\"} -5\nDCGM_FI_DEV_FB_FREE{gpu=\"0\"} 5\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFilterKeepsFamilies(t, data, dcgmFamilies)
		rd, err := ParseDCGMMetrics(data)
		if err != nil {
			return
		}
		for _, g := range rd.GPUs {
			if g.ID == "" {
				t.Fatalf("ParseDCGMMetrics accepted a GPU without ID: %+v", g)
			}
			if v, ok := g.Values[MemoryUsed]; ok && (math.IsNaN(v) || math.IsInf(v, 0)) {
				t.Fatalf("ParseDCGMMetrics memory_used = %v", v)
			}
		}
	})
}

// TestMemoryBlockReadingMatchesTheParser: the same figures, given in hand or
// as the endpoint's JSON, give the same reading.
func TestMemoryBlockReadingMatchesTheParser(t *testing.T) {
	t.Parallel()
	b := MemoryBlock{ID: "0", TotalBytes: 85899345920, UsedBytes: 68719476736, FreeBytes: 17179869184,
		LargestFreeBlockBytes: 11453246122, ReservedBytes: 60129542144, AllocatedBytes: 51539607552,
		FragmentationRatio: 0.6666666666666666, AllocRetryCount: 4}
	doc, _ := json.Marshal(map[string]any{"gpu_id": b.ID, "total_bytes": b.TotalBytes, "used_bytes": b.UsedBytes,
		"free_bytes": b.FreeBytes, "largest_free_block_bytes": b.LargestFreeBlockBytes, "reserved_bytes": b.ReservedBytes,
		"allocated_bytes": b.AllocatedBytes, "fragmentation_ratio": b.FragmentationRatio, "alloc_retry_count": b.AllocRetryCount})
	rd, err := ParseMemoryBlocks(doc)
	if err != nil {
		t.Fatal(err)
	}
	if got := MemoryBlockReading(b); !reflect.DeepEqual(got, rd.GPUs[0]) {
		t.Fatalf("MemoryBlockReading = %+v, the parser reads %+v", got, rd.GPUs[0])
	}
}
