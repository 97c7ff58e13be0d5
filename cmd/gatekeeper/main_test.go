package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

func TestRunFlags(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("upstreams:\n  - name: a\n    url: ftp://x\nlisen: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		wantErr bool
		stdout  string
		stderr  []string
	}{
		{name: "version", args: []string{"-version"}, stdout: "gatekeeper dev"},
		{name: "check default", args: []string{"-check"}, stdout: "embedded default policy: ok"},
		{name: "check repo config", args: []string{"-check", "-config", "../../config.yaml"}, stdout: "config.yaml: ok"},
		{name: "check bad", args: []string{"-check", "-config", bad}, wantErr: true,
			stderr: []string{"line 4", "lisen", "upstreams[0].url"}},
		{name: "missing file", args: []string{"-check", "-config", filepath.Join(dir, "nope.yaml")}, wantErr: true},
		{name: "stray argument", args: []string{"extra"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := command(t.Context(), tt.args, &out, &errb)
			if (err != nil) != tt.wantErr {
				t.Fatalf("run(%v) = %v, want error %v; stderr %s", tt.args, err, tt.wantErr, errb.String())
			}
			if !strings.Contains(out.String(), tt.stdout) {
				t.Errorf("stdout = %q, want it to contain %q", out.String(), tt.stdout)
			}
			for _, s := range tt.stderr {
				if !strings.Contains(errb.String(), s) {
					t.Errorf("stderr = %q, want it to contain %q", errb.String(), s)
				}
			}
		})
	}
}

func TestSettingsFrom(t *testing.T) {
	cfg := config.Default()
	s, err := settingsFrom(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.limiter.QPS != cfg.FastBreaker.QPS || s.limiter.Burst != cfg.FastBreaker.Burst {
		t.Errorf("limiter = %+v, want the fast_breaker keys", s.limiter)
	}
	if s.policy.MaxWait != cfg.Queue.MaxWait || s.policy.RetryAfter != cfg.Shed.RetryAfter ||
		s.policy.MaxBodyBytes != cfg.Server.MaxBodyBytes || s.policy.CharsPerToken != cfg.Estimate.CharsPerToken {
		t.Errorf("policy = %+v, want queue.max_wait, shed.retry_after, server.max_body_bytes, estimate", s.policy)
	}
	if len(s.upstreams) != len(cfg.Upstreams) || s.upstreams[0].url.String() != cfg.Upstreams[0].URL ||
		s.upstreams[0].maxInflight != cfg.Upstreams[0].MaxInflight {
		t.Errorf("upstreams = %+v, want %+v", s.upstreams, cfg.Upstreams)
	}
	if s.transport.IdleConnTimeout >= 5*time.Second {
		t.Errorf("idle conn timeout %v must stay below vLLM's 5 s keep-alive", s.transport.IdleConnTimeout)
	}
}

// startApp runs an app for cfgText on loopback listeners until the test ends.
func startApp(t *testing.T, cfgText string) (trafficURL, adminURL string, a *app, stop func()) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err = newApp(cfg, appOptions{path: path})
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.serveOn(ctx, tl, al, make(chan os.Signal)) }()
	var once sync.Once
	shutdown := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serveOn() = %v", err)
			}
		})
	}
	t.Cleanup(shutdown)
	return "http://" + tl.Addr().String(), "http://" + al.Addr().String(), a, shutdown
}

func TestEndToEndMetricsAndState(t *testing.T) {
	pod := http.NewServeMux()
	pod.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{"choices":[]}`) })
	pod.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {})
	ps := newPodServer(t, pod)
	traffic, admin, a, _ := startApp(t, "upstreams:\n  - name: pod-a\n    url: "+ps+"\nfast_breaker: {qps: 1, burst: 1}\nserver: {drain_delay: 0s}\n")

	codes := map[int]int{}
	for range 3 {
		res, err := http.Post(traffic+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hi"}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		codes[res.StatusCode]++
		if res.StatusCode == 429 && res.Header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
	}
	if codes[200] != 1 || codes[429] != 2 {
		t.Errorf("statuses = %v, want one 200 and two 429 past the QPS limit", codes)
	}
	metrics := fetch(t, admin+"/metrics")
	for _, want := range []string{
		`gatekeeper_requests_total{outcome="served"} 1`,
		`gatekeeper_requests_total{outcome="rate_limited"} 2`,
		`gatekeeper_window_limit{upstream="pod-a"} 256`,
		`gatekeeper_pressure_level{upstream="pod-a"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if res, err := http.Get(traffic + "/metrics"); err == nil {
		if res.StatusCode != 404 {
			t.Errorf("/metrics on the traffic port = %d, want 404", res.StatusCode)
		}
		res.Body.Close()
	}
	// vllm_gpu_memory_fragmentation is described even while nothing feeds
	// it: registering the family again must collide.
	dup := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vllm_gpu_memory_fragmentation", Help: "x"}, []string{"gpu_id"})
	if err := a.reg.Register(dup); err == nil {
		t.Error("vllm_gpu_memory_fragmentation is not registered")
	}
	st := fetch(t, admin+"/admin/state")
	for _, want := range []string{`"name": "pod-a"`, `"window_limit": 256`, `"breaker": "closed"`} {
		if !strings.Contains(st, want) {
			t.Errorf("/admin/state lacks %q:\n%s", want, st)
		}
	}
}

func newPodServer(t *testing.T, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}

func fetch(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

func TestPressureSettings(t *testing.T) {
	cfg, err := config.Parse([]byte(`
upstreams:
  - name: a
    url: http://127.0.0.1:8000
    gpus: ["0"]
    sources:
      - {kind: vllm, url: "http://127.0.0.1:8000/metrics", timeout: 300ms}
pressure:
  interval: 1s
  stale_after: 3s
  sources: [{kind: dcgm, url: "http://127.0.0.1:9400/metrics"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	s := pressureSettings(cfg)
	if s.Interval != time.Second || s.StaleAfter != 3*time.Second {
		t.Errorf("interval, stale_after = %v, %v; want 1s, 3s", s.Interval, s.StaleAfter)
	}
	if len(s.Sources) != 1 || s.Sources[0].Kind != "dcgm" {
		t.Errorf("node sources = %+v, want one dcgm", s.Sources)
	}
	u := s.Upstreams[0]
	if u.Name != "a" || len(u.GPUs) != 1 || len(u.Sources) != 1 || u.Sources[0].Timeout != 300*time.Millisecond {
		t.Errorf("upstream = %+v, want a with gpu 0 and its vllm source at 300ms", u)
	}
}
