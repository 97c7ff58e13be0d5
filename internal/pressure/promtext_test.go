package pressure

import (
	"bytes"
	"slices"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

var (
	vllmFamilies = []string{vllmKVUsage, vllmGPUCache, vllmRunning, vllmWaiting, vllmPreemptions}
	dcgmFamilies = []string{dcgmUsed, dcgmFree, dcgmReserved}
)

// checkFilterKeepsFamilies fails t when parsing only the named families of
// data differs from parsing all of it (when the full parse succeeds).
func checkFilterKeepsFamilies(t *testing.T, data []byte, names []string) {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	full, err := p.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		return
	}
	got, err := parseFamilies(data, names...)
	if err != nil {
		t.Fatalf("parseFamilies() = %v; the full parse succeeded", err)
	}
	for _, n := range names {
		a, b := full[n].String(), got[n].String()
		if a != b {
			t.Fatalf("family %s: filtered %s, full %s", n, b, a)
		}
	}
	for n := range got {
		if !slices.Contains(names, n) {
			t.Fatalf("parseFamilies() kept %s", n)
		}
	}
}

func TestParseFamiliesKeepsWhatTheFullParseSees(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"vllm-metrics-v1.txt", "vllm-metrics-v1-reconstructed-0.10.txt",
		"vllm-metrics-v0-reconstructed.txt", "dcgm-exporter.txt", "llmd-sim-metrics-kv-load.txt"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			data := fixture(t, name)
			checkFilterKeepsFamilies(t, data, vllmFamilies)
			checkFilterKeepsFamilies(t, data, dcgmFamilies)
		})
	}
	for _, in := range []string{
		"  vllm:num_requests_waiting 3\n#  TYPE   vllm:num_requests_waiting gauge\n", // odd spacing
		"vllm:num_requests_waiting{engine=\"0\"} 3",                                  // no final newline
		"# TYPE vllm:num_requests_waiting gauge\r\nvllm:num_requests_waiting 3\r\n",
		"broken line {\nvllm:num_requests_waiting 3\n",
	} {
		checkFilterKeepsFamilies(t, []byte(in), vllmFamilies)
	}
	if rd, err := ParseVLLMMetrics([]byte("broken line {\nvllm:num_requests_waiting 3\n")); err != nil || rd.Values[Waiting] != 3 {
		t.Errorf("ParseVLLMMetrics() = %v, %v; want waiting 3 despite a broken line elsewhere", rd, err)
	}
}
