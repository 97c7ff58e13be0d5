package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// adminView is the part of /admin/state these tests read.
type adminView struct {
	Upstreams []struct {
		Name        string `json:"name"`
		Level       string `json:"level"`
		WindowLimit int    `json:"window_limit"`
		MaxInflight int    `json:"max_inflight"`
		LastChange  *struct {
			Signal string  `json:"signal"`
			Source string  `json:"source"`
			Value  float64 `json:"value"`
			Stale  bool    `json:"stale"`
		} `json:"last_change"`
		Signals map[string]struct {
			Value float64 `json:"value"`
		} `json:"signals"`
	} `json:"upstreams"`
	Sources []struct {
		Name          string `json:"name"`
		NeverAnswered bool   `json:"never_answered"`
		Stale         bool   `json:"stale"`
	} `json:"sources"`
}

func readAdmin(t *testing.T, admin string) adminView {
	t.Helper()
	var v adminView
	if err := json.Unmarshal([]byte(fetch(t, admin+"/admin/state")), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// plainVLLM is a pod that serves only what every vLLM serves: /health and
// /metrics (the real capture when the shared fixtures are there).
func plainVLLM(t *testing.T) string {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, fixture("vllm-metrics-v1-reconstructed-0.10.txt", vllmMetrics))
	})
	return newPodServer(t, mux)
}

// shippedConfig is config.yaml pointed at pod, with extra appended to the
// upstream's sources.
func shippedConfig(t *testing.T, pod, extra string) string {
	t.Helper()
	b, err := os.ReadFile("../../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(b), "http://127.0.0.1:8000", pod)
	if extra != "" {
		const line = "      - {kind: vllm, url: " // the upstream's first source
		i := strings.Index(s, line)
		if i < 0 {
			t.Fatal("config.yaml: no vllm source line")
		}
		j := i + strings.Index(s[i:], "\n") + 1
		s = s[:j] + extra + "\n" + s[j:]
	}
	return s
}

// TestShippedConfigPlainVLLM: the shipped config.yaml in front of a pod that
// serves only vLLM's /metrics and /health keeps it normal with its full
// window, well past stale_after; and a memory_blocks source that never
// answers (no exporter in the pod) is shown and counted, not pressure.
func TestShippedConfigPlainVLLM(t *testing.T) {
	for _, tt := range []struct{ name, extra string }{
		{name: "as shipped"},
		{name: "with a memory_blocks source that never answers",
			extra: `      - {kind: memory_blocks, url: "POD/v1/internal/metrics"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := plainVLLM(t)
			r := startLifecycle(t, shippedConfig(t, pod, strings.ReplaceAll(tt.extra, "POD", pod)), nil)
			// The shipped interval is 500ms and stale_after 2s: look after 3 s
			// of poll rounds (bounded by the round count).
			start := time.Now()
			for round := 0; time.Since(start) < 3*time.Second && round < 100; round++ {
				r.waitStage(t, "pressure")
			}
			v := readAdmin(t, r.admin)
			if len(v.Upstreams) != 1 {
				t.Fatalf("upstreams = %+v", v.Upstreams)
			}
			u := v.Upstreams[0]
			if u.Level != "normal" || u.WindowLimit != u.MaxInflight || u.MaxInflight != 256 || u.LastChange != nil {
				t.Fatalf("pod = level %s window %d/%d last change %+v, want normal at 256/256 and no change",
					u.Level, u.WindowLimit, u.MaxInflight, u.LastChange)
			}
			if _, ok := u.Signals["kv_cache_usage"]; !ok {
				t.Errorf("signals = %v, want kv_cache_usage from the pod's /metrics", u.Signals)
			}
			never := 0
			for _, s := range v.Sources {
				if s.NeverAnswered {
					never++
					if !strings.Contains(s.Name, "memory_blocks") {
						t.Errorf("source %s never answered", s.Name)
					}
				}
			}
			m := fetch(t, r.admin+"/metrics")
			if tt.extra == "" {
				if len(v.Sources) != 1 || never != 0 {
					t.Errorf("sources = %+v, want the pod's /metrics only, answering", v.Sources)
				}
				return
			}
			if never != 1 || !strings.Contains(m, `gatekeeper_source_never_answered{source="memory_blocks:`+pod+`/v1/internal/metrics"} 1`) {
				t.Errorf("sources = %+v; the missing exporter must show as never_answered in /admin/state and /metrics", v.Sources)
			}
		})
	}
}

// startExporter runs the Python exporter (exporters/pytorch) on loopback
// with a fake torch.cuda serving the golden two-GPU scenario, and returns
// its base URL. args go to tests/serve_fake.py (--empty-cache, --token T,
// ...). It skips without python3, unless the suite requires tools.
func startExporter(t *testing.T, args ...string) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("GATEKEEPER_REQUIRE_TOOLS") == "1" {
			t.Fatal("python3 not found")
		}
		t.Skip("python3 not found")
	}
	cmd := exec.Command(py, append([]string{"-m", "tests.serve_fake"}, args...)...)
	cmd.Dir = filepath.Join("..", "..", "exporters", "pytorch")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close() // the exporter stops when its stdin closes
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	port, ok := strings.CutPrefix(strings.TrimSpace(line), "PORT ")
	if err != nil || !ok {
		t.Fatalf("exporter said %q, %v", line, err)
	}
	return "http://127.0.0.1:" + port
}

// TestExporterEndToEnd: the allocator exporter on loopback (fake torch, the
// golden scenario), gatekeeper reading it as the README's vLLM section
// says: the ratio reaches the policy and vllm_gpu_memory_fragmentation.
func TestExporterEndToEnd(t *testing.T) {
	exp := startExporter(t)
	pod := plainVLLM(t)
	r := startLifecycle(t, `
upstreams:
  - name: vllm-0
    url: `+pod+`
    gpus: ["0", "1"]
    sources:
      - {kind: vllm, url: "`+pod+`/metrics"}
      - {kind: memory_blocks, url: "`+exp+`/memory_blocks"}
pressure:
  interval: 100ms
  stale_after: 1s
server: {drain_delay: 0s}
`, nil)
	// The state shows the monitor's latest readings at once, the level only
	// once the controller has observed them: wait for both (bounded by the
	// round count).
	var v adminView
	for round := 0; round < 100; round++ {
		r.waitStage(t, "pressure")
		if v = readAdmin(t, r.admin); len(v.Upstreams) == 1 && v.Upstreams[0].Signals["fragmentation"].Value > 0 &&
			v.Upstreams[0].LastChange != nil {
			break
		}
	}
	u := v.Upstreams[0]
	// The golden scenario: GPU 1 has 3 GiB free of which 1 GiB in one piece
	// (ratio 3, critical); GPU 0 is healthy.
	if f := u.Signals["fragmentation"].Value; f < 2.9 || f > 3.1 {
		t.Fatalf("fragmentation = %v, want ≈ 3 (GPU 1 of the golden scenario); signals %v", f, u.Signals)
	}
	if u.Level != "critical" || u.LastChange == nil || u.LastChange.Signal != "fragmentation" ||
		!strings.Contains(u.LastChange.Source, "memory_blocks") {
		t.Fatalf("level %s, last change %+v; want critical on fragmentation from the exporter", u.Level, u.LastChange)
	}
	m := fetch(t, r.admin+"/metrics")
	for _, want := range []string{`vllm_gpu_memory_fragmentation{gpu_id="0"} 0.9`, `vllm_gpu_memory_fragmentation{gpu_id="1"} 0.33`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, grepLines(m, "vllm_gpu_memory_fragmentation"))
		}
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
