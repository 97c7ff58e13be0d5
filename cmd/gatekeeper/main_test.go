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
