package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// fixtureServer serves package pressure's test answers under their file
// names, and 503 at /down.
func fixtureServer(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	for _, name := range []string{"vllm-two-engines.txt", "dcgm-two-gpus.txt", "memory-blocks.json"} {
		body, err := os.ReadFile("../../internal/pressure/testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		mux.HandleFunc("/"+name, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) })
	}
	mux.HandleFunc("/down", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "loading model", http.StatusServiceUnavailable)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestProbe(t *testing.T) {
	t.Parallel()
	base := fixtureServer(t)
	refused := httptest.NewServer(http.NotFoundHandler())
	refused.Close() // nothing listens there any more
	tests := []struct {
		name    string
		args    []string
		wantErr string   // substring of the error; "" for none
		stdout  []string // lines stdout must hold
	}{
		{name: "vllm guessed", args: []string{base + "/vllm-two-engines.txt"}, stdout: []string{
			"vllm " + base + "/vllm-two-engines.txt (kind guessed from the answer; -kind sets it)",
			"SIGNAL           GPU  VALUE", "kv_cache_usage   -    0.75", "preemption_rate  -    11 (counter)",
			"waiting          -    3", "running          -    7",
		}},
		{name: "dcgm, kind after the url", args: []string{base + "/dcgm-two-gpus.txt", "-kind", "dcgm"}, stdout: []string{
			"dcgm " + base + "/dcgm-two-gpus.txt\n", "memory_used  0 (GPU-aaa)  0.9", "memory_used  1 (GPU-bbb)  0.5",
		}},
		{name: "memory_blocks, kind before the url", args: []string{"-kind", "memory_blocks", base + "/memory-blocks.json"}, stdout: []string{
			"free_memory_bytes      0    17179869184", "alloc_retry_rate       0    4 (counter)",
		}},
		{name: "wrong kind", args: []string{"-kind", "dcgm", base + "/vllm-two-engines.txt"},
			wantErr: "probe: " + base + "/vllm-two-engines.txt: not a dcgm answer: pressure: dcgm: pressure: no known metric in answer"},
		{name: "http status", args: []string{base + "/down"}, wantErr: "probe: GET " + base + `/down: status 503 Service Unavailable ("loading model")`},
		{name: "connection refused", args: []string{refused.URL + "/metrics"}, wantErr: refused.URL + `/metrics": dial tcp`},
		{name: "no url", args: nil, wantErr: "probe: which source?"},
		{name: "two urls", args: []string{base + "/a", base + "/b"}, wantErr: `probe: unexpected argument "` + base + `/b"`},
		{name: "bad timeout", args: []string{"-timeout", "0s", base}, wantErr: "probe: -timeout must be positive"},
		{name: "unknown kind", args: []string{"-kind", "prom", base}, wantErr: `probe: unknown kind "prom"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			args := append([]string{"probe"}, tt.args...)
			err := command(t.Context(), args, &out, &errb)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("command(%v) = %v", args, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("command(%v) = %v, want an error containing %q", args, err, tt.wantErr)
			case err != nil && exitCode(err) != 1:
				t.Errorf("exitCode(%v) = %d, want 1", err, exitCode(err))
			}
			for _, l := range tt.stdout {
				if !strings.Contains(out.String(), l) {
					t.Errorf("stdout lacks %q:\n%s", l, out.String())
				}
			}
		})
	}
}
