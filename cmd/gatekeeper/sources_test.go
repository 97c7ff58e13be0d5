package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/admin"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// Small payloads in the shapes of DESIGN §3 and the real captures.
const (
	vllmMetrics = `# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 7
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 2
`
	dcgmMetrics = `# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-1",device="nvidia0",modelName="NVIDIA L4",Hostname="n"} 1000
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1",device="nvidia0",modelName="NVIDIA L4",Hostname="n"} 9000
# TYPE DCGM_FI_DEV_FB_RESERVED gauge
DCGM_FI_DEV_FB_RESERVED{gpu="0",UUID="GPU-1",device="nvidia0",modelName="NVIDIA L4",Hostname="n"} 0
`
	memoryBlocks = `{"memory_blocks": [{"gpu_id": "0", "total_bytes": 85899345920, "used_bytes": 68719476736,
  "free_bytes": 17179869184, "largest_free_block_bytes": 11453246122,
  "reserved_bytes": 60129542144, "allocated_bytes": 51539607552,
  "block_count": 612, "fragmentation_ratio": 0.6667, "alloc_retry_count": 4}]}`
)

// fixture returns a real capture from the shared fixtures when present.
func fixture(name, fallback string) string {
	if b, err := os.ReadFile("../../../shared/fixtures/" + name); err == nil {
		return string(b)
	}
	return fallback
}

// TestEverySignalVisible points gatekeeper at a vLLM /metrics, a DCGM
// exporter and a memory_blocks endpoint and checks that every signal shows
// up with its source and age in /admin/state and in /metrics.
func TestEverySignalVisible(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, fixture("vllm-metrics-v1-reconstructed-0.10.txt", vllmMetrics))
	})
	mux.HandleFunc("/dcgm", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, fixture("dcgm-exporter.txt", dcgmMetrics))
	})
	mux.HandleFunc("/v1/internal/metrics", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, memoryBlocks)
	})
	pod := newPodServer(t, mux)
	r := startLifecycle(t, `
upstreams:
  - name: pod
    url: `+pod+`
    gpus: ["0"]
    sources:
      - {kind: vllm, url: "`+pod+`/metrics"}
      - {kind: memory_blocks, url: "`+pod+`/v1/internal/metrics"}
pressure:
  interval: 100ms
  stale_after: 1s
  sources: [{kind: dcgm, url: "`+pod+`/dcgm"}]
server: {drain_delay: 0s}
`, nil)
	// Rates need two readings of their source, and the default fragmentation
	// rule a ratio held for 2 s: wait for poll rounds until nothing is absent
	// and the level has risen (bounded by the stage wait and the round count).
	var st admin.State
	for round := 0; ; round++ {
		r.waitStage(t, "pressure")
		st = admin.State{}
		if err := json.Unmarshal([]byte(fetch(t, r.admin+"/admin/state")), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Upstreams) == 1 && len(st.Upstreams[0].Absent) == 0 && st.Upstreams[0].Level == "critical" || round == 80 {
			break
		}
	}
	if len(st.Upstreams) != 1 {
		t.Fatalf("upstreams = %+v", st.Upstreams)
	}
	sig := st.Upstreams[0].Signals
	for _, name := range []string{"fragmentation", "kv_cache_usage", "memory_used", "waiting", "preemption_rate",
		"alloc_retry_rate", "fragmentation_growth", "effective_utilization"} {
		v, ok := sig[pressure.Signal(name)]
		if !ok {
			t.Errorf("/admin/state lacks signal %s (absent: %v)", name, st.Upstreams[0].Absent)
			continue
		}
		if v.Source == "" || v.At.IsZero() {
			t.Errorf("signal %s = %+v, want its source and time", name, v)
		}
	}
	if f := sig["fragmentation"].Value; f < 1.49 || f > 1.51 {
		t.Errorf("fragmentation = %v, want 17179869184 ÷ 11453246122 = 1.5", f)
	}
	if len(st.Sources) != 3 {
		t.Errorf("sources = %+v, want vllm, memory_blocks and dcgm", st.Sources)
	}
	for _, s := range st.Sources {
		if !s.Up || s.Stale {
			t.Errorf("source %s up=%v stale=%v, want up and fresh (err %q)", s.Name, s.Up, s.Stale, s.LastError)
		}
	}
	m := fetch(t, r.admin+"/metrics")
	for _, want := range []string{
		`vllm_gpu_memory_fragmentation{gpu_id="0"} 0.666`,
		`gatekeeper_pressure_signal{gpu_id="",signal="kv_cache_usage",upstream="pod"}`,
		`gatekeeper_pressure_signal_age_seconds{`,
		`gatekeeper_effective_utilization{gpu_id="0",upstream="pod"}`,
		`gatekeeper_source_up{source="dcgm:` + pod + `/dcgm"} 1`,
		`gatekeeper_source_last_success_timestamp_seconds{source="vllm:` + pod + `/metrics"}`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// The ratio 1.5 is at the default shed threshold, held for its 2 s: the
	// pod is critical.
	if st.Upstreams[0].Level != "critical" {
		t.Errorf("level = %q, want critical at fragmentation 1.5", st.Upstreams[0].Level)
	}
}
