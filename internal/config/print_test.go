package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// roundTrip checks that Marshal(c) parses back to c and marshals again to
// the same bytes.
func roundTrip(t *testing.T, c *Config) []byte {
	t.Helper()
	out, err := Marshal(c)
	if err != nil {
		t.Fatalf("Marshal() = %v", err)
	}
	back, err := Parse(out)
	if err != nil {
		t.Fatalf("Parse(Marshal()) = %v\n%s", err, out)
	}
	if d := Diff(c, back); len(d) > 0 {
		t.Errorf("Parse(Marshal()) differs at %v\n%s", d, out)
	}
	again, err := Marshal(back)
	if err != nil {
		t.Fatalf("Marshal(Parse(Marshal())) = %v", err)
	}
	if !bytes.Equal(out, again) {
		t.Errorf("Marshal is not stable:\n%s\nthen\n%s", out, again)
	}
	return out
}

func TestMarshalRoundTripFiles(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.good.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no good files: %v", err)
	}
	if _, err := os.Stat("../../config.yaml"); err == nil {
		files = append(files, "../../config.yaml")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			c, err := LoadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			roundTrip(t, c)
		})
	}
}

func TestMarshal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy string
		want   []string // lines the output must hold
	}{
		{name: "defaults filled in", policy: `upstreams: [{url: "http://a:8000"}]`, want: []string{
			"  - name: a:8000\n", "    max_inflight: 256\n", "    min_inflight: 4\n",
			"  ttft_deadline: 1500ms\n", "  response_header_timeout: 10m\n", "  idle_timeout: 2m\n",
			"    fragmentation: {degrade: 1.2, shed: 1.5, horizon: 0s, for: 2s}\n",
			"  burst: 40\n", "  admin_token_file: \"\"\n",
		}},
		{name: "removed default rule stays removed", policy: `
upstreams: [{url: "http://a:8000"}]
pressure: {rules: {kv_cache_usage: null, fragmentation: {}, waiting: {degrade: 8}}}
`, want: []string{"    kv_cache_usage: {}\n", "    fragmentation: {}\n", "    waiting: {degrade: 8, horizon: 0s, for: 0s}\n"}},
		{name: "strings that read as other types", policy: `
upstreams:
  - url: http://a:8000
    gpus: ["0", "true", "null", "1.5"]
    models: ["meta-llama/Llama-3.1-8B-Instruct", "a: b", "#x", " lead"]
    rules: {waiting: {}}
model_limits: {"yes": {qps: 1}}
`, want: []string{`    gpus: ["0", "true", "null", "1.5"]`, `    rules:`, `      waiting: {horizon: 0s, for: 0s}`}},
		{name: "hook body over lines, odd durations", policy: `
upstreams: [{url: "http://a:8000", dns_interval: 90s}]
batch: {failure_hold: 1h30m}
hooks:
  critical:
    - url: http://h:1/x?y=1
      body: "{\n  \"a\": 1\n}\n"
      headers: {X-A: "1"}
      timeout: 1500us
`, want: []string{"    dns_interval: 90s\n", "  failure_hold: 90m\n", "      timeout: 1500us\n"}},
		{name: "optional sections", policy: `
upstreams: [{url: "http://a:8000"}]
server: {tls: {cert_file: /c, key_file: /k}}
fast_breaker: {qps: 0, per_client: {header: Authorization, qps: 0.5}}
cluster: {redis: {url: "redis://r:6379/0"}, replicas: 3}
`, want: []string{"  tls:\n    cert_file: /c\n", "  qps: 0\n  burst: 40\n", "    burst: 1\n", "cluster:\n  redis:\n    url: redis://r:6379/0\n", "  replicas: 3\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse([]byte(tt.policy))
			if err != nil {
				t.Fatal(err)
			}
			out := string(roundTrip(t, c))
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("Marshal() lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "null") && !strings.Contains(tt.policy, `"null"`) {
				t.Errorf("Marshal() writes a null:\n%s", out)
			}
		})
	}
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0s", 2 * time.Hour: "2h", 90 * time.Minute: "90m", 90 * time.Second: "90s",
		1500 * time.Millisecond: "1500ms", 3 * time.Microsecond: "3us", 7: "7ns", -5 * time.Second: "-5s",
	} {
		got := formatDuration(d)
		if got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
		if back, err := time.ParseDuration(got); err != nil || back != d {
			t.Errorf("time.ParseDuration(%q) = %v, %v; want %v", got, back, err, d)
		}
	}
}

// FuzzMarshal: whatever Parse accepts, Marshal writes back to the same
// policy, and what it writes is stable.
func FuzzMarshal(f *testing.F) {
	f.Add(defaultYAML)
	files, _ := filepath.Glob("testdata/*.good.yaml")
	for _, name := range files {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		roundTrip(t, c)
	})
}
