package deploy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/syncbuf"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// gatekeeper is a gatekeeper binary built from this module, running as a
// child process on loopback in front of a fake vLLM pod.
type gatekeeper struct {
	traffic, admin string // host:port
	client         *http.Client
	log            *syncbuf.Buffer  // its stdout and stderr
	volume         *configMapVolume // holds config.yaml, the policy
	policy         string           // the policy first written
	exited         <-chan error     // receives the process's exit
}

// startGatekeeper builds ./cmd/gatekeeper, starts it with a policy whose
// pod is an in-process fake vLLM (health, metrics, allocator endpoint, chat
// completions), waits until its pressure signals are exported and sends a
// little traffic, so most metric families have series. Cleanup stops it
// with SIGTERM (SIGKILL after 10 s).
func startGatekeeper(t *testing.T) *gatekeeper {
	t.Helper()
	bin := buildGatekeeper(t)
	pod := httptest.NewServer(fakeVLLM())
	t.Cleanup(pod.Close)
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	gk := &gatekeeper{traffic: freeAddr(t), admin: freeAddr(t), log: new(syncbuf.Buffer),
		client: &http.Client{Transport: transport, Timeout: 5 * time.Second}}
	gk.volume = &configMapVolume{dir: t.TempDir()}
	gk.policy = fmt.Sprintf(testPolicy, gk.traffic, gk.admin, pod.URL, pod.URL, pod.URL)
	gk.volume.update(t, map[string]string{"config.yaml": gk.policy})
	exited := startProcess(t, gk.log, bin, "-config", filepath.Join(gk.volume.dir, "config.yaml"))
	gk.exited = exited

	// Ready, and the derived allocator rates exported (they need two readings).
	waitFor(t, 30*time.Second, exited, gk.log, "gatekeeper ready with pressure signals", func() bool {
		if code, _ := gk.get("http://" + gk.traffic + "/readyz"); code != http.StatusOK {
			return false
		}
		_, body := gk.get("http://" + gk.admin + "/metrics")
		return strings.Contains(body, "\ngatekeeper_alloc_retry_rate{") &&
			strings.Contains(body, "\ngatekeeper_fragmentation_growth_rate{")
	})
	for range 3 {
		resp, err := gk.client.Post("http://"+gk.traffic+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":8}`))
		if err != nil {
			t.Fatalf("POST /v1/chat/completions: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /v1/chat/completions = %d, want 200; log:\n%s", resp.StatusCode, gk.log)
		}
	}
	if code, _ := gk.get("http://" + gk.traffic + "/no/such/route"); code != http.StatusNotFound {
		t.Fatalf("GET /no/such/route = %d, want 404", code)
	}
	return gk
}

// configMapVolume lays out files as kubelet does in a ConfigMap volume: the
// files live in a timestamped folder, "..data" links to it, and each file
// name links through "..data". An update writes a new folder and renames a
// new "..data" link over the old one, so readers see the change at once.
type configMapVolume struct {
	dir     string
	version int    // of the current folder
	current string // its name
}

func (v *configMapVolume) update(t *testing.T, files map[string]string) {
	t.Helper()
	v.version++
	name := fmt.Sprintf("..2026_11_30_00_00_%02d.%d", v.version, v.version)
	if err := os.Mkdir(filepath.Join(v.dir, name), 0o755); err != nil {
		t.Fatal(err)
	}
	for file, content := range files {
		if err := os.WriteFile(filepath.Join(v.dir, name, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(name, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if v.current != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, v.current)); err != nil {
			t.Fatal(err)
		}
	}
	for file := range files {
		link := filepath.Join(v.dir, file)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", file), link); err != nil {
			t.Fatal(err)
		}
	}
	v.current = name
}

// buildGatekeeper builds ./cmd/gatekeeper into a temporary folder, with
// -race when the tests have it, and returns the binary's path.
func buildGatekeeper(t *testing.T) string {
	t.Helper()
	goBin := lookTool(t, "go", "Go")
	bin := filepath.Join(t.TempDir(), "gatekeeper")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.CommandContext(ctx, goBin, append(args, "github.com/gatekeeper-dev/gatekeeper/cmd/gatekeeper")...)
	build.Env = os.Environ()
	if os.Getenv("CGO_CFLAGS") == "" {
		build.Env = append(build.Env, "CGO_CFLAGS=-O2 -Wno-deprecated-declarations")
	}
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/gatekeeper: %v\n%s", err, out)
	}
	return bin
}

// testPolicy: listen, admin_listen, then the fake pod's URL three times.
const testPolicy = `server:
  listen: %s
  admin_listen: %s
  drain_delay: 0s
  shutdown_timeout: 1s
upstreams:
  - name: vllm-0
    url: %s
    gpus: ["0"]
    sources:
      - {kind: vllm, url: %s/metrics}
      - {kind: memory_blocks, url: %s/v1/internal/metrics}
pressure:
  interval: 100ms
health_check:
  interval: 200ms
  timeout: 100ms
log:
  level: warn
`

// get returns the status and body of a GET; status 0 when it failed.
func (gk *gatekeeper) get(url string) (int, string) {
	resp, err := gk.client.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// scrape returns the admin listener's /metrics.
func (gk *gatekeeper) scrape(t *testing.T) []byte {
	t.Helper()
	code, body := gk.get("http://" + gk.admin + "/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d, want 200", code)
	}
	return []byte(body)
}

// families returns the metric family names in a scrape.
func families(t *testing.T, scrape []byte) map[string]bool {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(scrape))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	names := make(map[string]bool, len(mfs))
	for name := range mfs {
		names[name] = true
	}
	return names
}

// startProcess starts bin with its output going to log and returns a
// channel that receives Wait's result. Cleanup stops it with SIGTERM, then
// SIGKILL after 10 s, and fails the test unless it exited 0.
func startProcess(t *testing.T, log *syncbuf.Buffer, bin string, args ...string) <-chan error {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", filepath.Base(bin), err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		timer := time.NewTimer(10 * time.Second)
		defer timer.Stop()
		select {
		case err := <-exited:
			// Both gatekeeper and Prometheus exit 0 on SIGTERM; a race
			// detected in a -race binary makes it exit 66.
			if err != nil || strings.Contains(log.String(), "DATA RACE") {
				t.Errorf("%s exited with %v after SIGTERM; log:\n%s", filepath.Base(bin), err, log)
			}
		case <-timer.C:
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("%s did not exit within 10 s of SIGTERM; log:\n%s", filepath.Base(bin), log)
		}
	})
	return exited
}

// waitFor polls cond every 50 ms until it holds, failing the test after
// limit or when the process exits first.
func waitFor(t *testing.T, limit time.Duration, exited <-chan error, log fmt.Stringer, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case err := <-exited:
			t.Fatalf("waiting for %s: the process exited: %v; log:\n%s", what, err, log)
		case <-deadline.C:
			t.Fatalf("waiting for %s: not within %v; log:\n%s", what, limit, log)
		case <-tick.C:
		}
	}
}

// fakeVLLM answers like a vLLM pod: /health, Prometheus /metrics, the
// allocator endpoint (whose largest free block shrinks and retry count
// grows at every read, so the derived rates are non-zero) and chat
// completions.
func fakeVLLM() http.Handler {
	var reads atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		io.WriteString(w, `# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 1
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 0
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 0
`)
	})
	mux.HandleFunc("GET /v1/internal/metrics", func(w http.ResponseWriter, _ *http.Request) {
		n := reads.Add(1)
		const gib = 1 << 30
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"memory_blocks":[{"gpu_id":0,"total_bytes":%d,"used_bytes":%d,"free_bytes":%d,
"largest_free_block_bytes":%d,"reserved_bytes":%d,"allocated_bytes":%d,"alloc_retry_count":%d}]}`,
			// retries stay at 3: a pod that keeps retrying is degraded by the
			// default alloc_retry_rate rule, and this one must stay normal
			80*gib, 70*gib, 10*gib, 9*gib-min(n, 1000)*(1<<20), 68*gib, 60*gib, 3)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m",
"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],
"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	})
	return mux
}
