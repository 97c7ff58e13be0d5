package config

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestWarnings(t *testing.T) {
	t.Parallel()
	// want is one "path@line: message substring" per warning, in order.
	tests := []struct {
		name     string
		policy   string
		replicas int
		want     []string
	}{
		{name: "default", policy: string(defaultYAML), replicas: 1},
		{name: "own vllm source", replicas: 1, policy: `
upstreams:
  - url: http://a:8000
    sources: [{kind: vllm, url: http://a:8000/metrics}]
`},
		{name: "no source at all", replicas: 1, policy: `
upstreams:
  - url: http://a:8000
  - url: http://b:8000
    sources: [{kind: vllm, url: http://b:8000/metrics}]
`, want: []string{"upstreams[0].sources@3: no pressure source reads this pod: the slow breaker has no signal for it"}},
		{name: "sources written empty", replicas: 1, policy: `
upstreams:
  - url: http://a:8000
    sources: []
`, want: []string{"upstreams[0].sources@4: no pressure source reads this pod"}},
		{name: "node source covers gpus", replicas: 1, policy: `
upstreams:
  - {url: "http://a:8000", gpus: ["0"]}
pressure:
  sources: [{kind: nvml}]
`},
		{name: "node source, pod without gpus", replicas: 1, policy: `
upstreams:
  - {url: "http://a:8000", gpus: ["0"]}
  - {url: "http://b:8000"}
pressure:
  sources: [{kind: dcgm, url: "http://127.0.0.1:9400/metrics"}]
`, want: []string{"upstreams[1].sources@4: no pressure source reads this pod: pressure.sources are matched to pods by gpus and upstreams[1].gpus is empty"}},
		{name: "vocab_size without memory_blocks", replicas: 1, policy: `
upstreams:
  - url: http://a:8000
    vocab_size: 128256
    sources: [{kind: vllm, url: http://a:8000/metrics}]
`, want: []string{"upstreams[0].vocab_size@4: memory admission needs a memory_blocks source for this pod"}},
		{name: "vocab_size with its own memory_blocks", replicas: 1, policy: `
upstreams:
  - url: http://a:8000
    vocab_size: 128256
    sources: [{kind: memory_blocks, url: http://a:8000/memory_blocks}]
`},
		{name: "vocab_size with node memory_blocks", replicas: 1, policy: `
upstreams:
  - {url: "http://a:8000", vocab_size: 128256, gpus: ["0"]}
pressure:
  sources: [{kind: memory_blocks, url: "http://127.0.0.1:7000/memory_blocks"}]
`},
		{name: "vocab_size, node memory_blocks, no gpus", replicas: 1, policy: `
upstreams:
  - url: http://a:8000
    vocab_size: 128256
pressure:
  sources: [{kind: memory_blocks, url: "http://127.0.0.1:7000/memory_blocks"}]
`, want: []string{
			"upstreams[0].sources@3: pressure.sources are matched to pods by gpus",
			"upstreams[0].vocab_size@4: memory admission needs a memory_blocks source",
		}},
		{name: "replicas without cluster", replicas: 3, policy: `
upstreams: [{url: "http://a:8000", sources: [{kind: vllm, url: "http://a:8000/metrics"}]}]
`, want: []string{"cluster@0: 3 replicas without a cluster section: each enforces every limit and window alone, so the pods can get 3× fast_breaker.qps"}},
		{name: "zero replicas without cluster means one", replicas: 0, policy: `
upstreams: [{url: "http://a:8000", sources: [{kind: vllm, url: "http://a:8000/metrics"}]}]
`},
		{name: "zero replicas means what cluster.replicas says", replicas: 0, policy: `
upstreams: [{url: "http://a:8000", sources: [{kind: vllm, url: "http://a:8000/metrics"}]}]
cluster:
  redis: {url: "redis://127.0.0.1:6379/0"}
  replicas: 4
`},
		{name: "zero replicas, cluster.replicas not set", replicas: 0, policy: `
upstreams: [{url: "http://a:8000", sources: [{kind: vllm, url: "http://a:8000/metrics"}]}]
cluster:
  redis: {url: "redis://127.0.0.1:6379/0"}
`},
		{name: "cluster replicas match", replicas: 3, policy: `
upstreams: [{url: "http://a:8000", sources: [{kind: vllm, url: "http://a:8000/metrics"}]}]
cluster:
  redis: {url: "redis://127.0.0.1:6379/0"}
  replicas: 3
`},
		{name: "cluster replicas differ", replicas: 3, policy: `
upstreams: [{url: "http://a:8000", sources: [{kind: vllm, url: "http://a:8000/metrics"}]}]
cluster:
  redis: {url: "redis://127.0.0.1:6379/0"}
  replicas: 2
`, want: []string{"cluster.replicas@5: is 2, but 3 replicas run: until Redis first answers each takes 1/2 of every limit and window, 3/2 of them together"}},
		{name: "cluster replicas more than run", replicas: 1, policy: `
upstreams: [{url: "http://a:8000", sources: [{kind: vllm, url: "http://a:8000/metrics"}]}]
cluster:
  redis: {url: "redis://127.0.0.1:6379/0"}
  replicas: 4
`, want: []string{"cluster.replicas@5: is 4, but 1 replica runs: until Redis first answers each takes 1/4 of every limit and window, 1/4 of them together"}},
		{name: "cluster replicas not set", replicas: 2, policy: `
upstreams: [{url: "http://a:8000", sources: [{kind: vllm, url: "http://a:8000/metrics"}]}]
cluster:
  redis: {url: "redis://127.0.0.1:6379/0"}
`, want: []string{"cluster.replicas@3: is 1 (not set), but 2 replicas run: until Redis first answers each takes every limit and window whole, 2× them together"}},
		{name: "max_wait beyond the default deadline", replicas: 1, policy: `
upstreams: [{url: "http://a:8000", sources: [{kind: vllm, url: "http://a:8000/metrics"}]}]
queue:
  max_wait: 60s
`, want: []string{"queue.max_wait@4: 1m is longer than queue.ttft_deadline, which this file does not set: its default 1500ms applies to every request, which gets 503 deadline once it cannot start within 1500ms and so never waits 1m; set queue.ttft_deadline (0s: no deadline, max_wait alone)"}},
		{name: "max_wait beyond a written deadline", replicas: 1, policy: `
upstreams: [{url: "http://a:8000", sources: [{kind: vllm, url: "http://a:8000/metrics"}]}]
queue: {max_wait: 60s, ttft_deadline: 2s}
`},
		{name: "max_wait and no deadline", replicas: 1, policy: `
upstreams: [{url: "http://a:8000", sources: [{kind: vllm, url: "http://a:8000/metrics"}]}]
queue: {max_wait: 60s, ttft_deadline: 0s}
`},
		{name: "max_wait within the default deadline", replicas: 1, policy: `
upstreams: [{url: "http://a:8000", sources: [{kind: vllm, url: "http://a:8000/metrics"}]}]
queue: {max_wait: 1s, starvation_after: 500ms}
`},
		{name: "max_wait left out", replicas: 1, policy: `
upstreams: [{url: "http://a:8000", sources: [{kind: vllm, url: "http://a:8000/metrics"}]}]
queue: {max_length: 10}
`},
		{name: "max_wait beyond the default deadline, observe mode", replicas: 1, policy: `
mode: observe
upstreams: [{url: "http://a:8000", sources: [{kind: vllm, url: "http://a:8000/metrics"}]}]
queue: {max_wait: 60s}
`},
		{name: "max_wait beyond the default deadline of some classes", replicas: 1, policy: `
upstreams: [{url: "http://a:8000", sources: [{kind: vllm, url: "http://a:8000/metrics"}]}]
queue:
  max_wait: 60s
classes:
  default: chat
  list:
    - {name: chat}
    - {name: docs, ttft_deadline: 120s}
    - {name: batch, ttft_deadline: 0s}
`, want: []string{`queue.max_wait@4: its default 1500ms applies to every request of class "chat", "batch" (no ttft_deadline of its own), which gets 503 deadline once it cannot start within 1500ms and so never waits 1m; set queue.ttft_deadline (0s: no deadline, max_wait alone), or give a class that should wait longer its own classes.list[].ttft_deadline`}},
		{name: "max_wait, every class its own deadline", replicas: 1, policy: `
upstreams: [{url: "http://a:8000", sources: [{kind: vllm, url: "http://a:8000/metrics"}]}]
queue:
  max_wait: 60s
classes:
  default: chat
  list:
    - {name: chat, ttft_deadline: 2s}
    - {name: docs, ttft_deadline: 120s}
`},
		{name: "ordered by line, no line last", replicas: 2, policy: `
upstreams:
  - url: http://a:8000
    vocab_size: 128256
  - url: http://b:8000
`, want: []string{
			"upstreams[0].sources@3: no pressure source",
			"upstreams[0].vocab_size@4: memory admission",
			"upstreams[1].sources@5: no pressure source",
			"cluster@0: 2 replicas without a cluster section",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse([]byte(tt.policy))
			if err != nil {
				t.Fatalf("Parse() = %v", err)
			}
			got := c.Warnings(tt.replicas)
			if len(got) != len(tt.want) {
				t.Fatalf("Warnings(%d) = %v, want %d warnings %v", tt.replicas, got, len(tt.want), tt.want)
			}
			for i, w := range got {
				where, msg, _ := strings.Cut(tt.want[i], ": ")
				if at := w.Path + "@" + strconv.Itoa(w.Line); at != where || !strings.Contains(w.Msg, msg) {
					t.Errorf("Warnings(%d)[%d] = %s@%d: %s, want %s: …%s…", tt.replicas, i, w.Path, w.Line, w.Msg, where, msg)
				}
			}
		})
	}
}

func TestWarningString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		w    Warning
		want string
	}{
		{Warning{Path: "upstreams[0].sources", Line: 12, Msg: "no source"}, "config: line 12: upstreams[0].sources: warning: no source"},
		{Warning{Path: "cluster", Msg: "m"}, "config: cluster: warning: m"},
	}
	for _, tt := range tests {
		if got := tt.w.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.w, got, tt.want)
		}
	}
}

// TestWarningsGoodFiles keeps the testdata policies meaningful: every
// warning one raises is one the table above expects of it.
func TestWarningsGoodFiles(t *testing.T) {
	t.Parallel()
	want := map[string][]string{
		"classes.good.yaml": {"upstreams[0].sources"},
		// DESIGN §6's example sets max_wait and leaves the deadline out.
		"design.good.yaml":  {"queue.max_wait"},
		"cluster.good.yaml": {"upstreams[0].sources"},
		"minimal.good.yaml": {"upstreams[0].sources"},
	}
	files, _ := filepath.Glob("testdata/*.good.yaml")
	for _, f := range files {
		c, err := LoadFile(f)
		if err != nil {
			t.Fatalf("LoadFile(%s) = %v", f, err)
		}
		var got []string
		for _, w := range c.Warnings(1) {
			got = append(got, w.Path)
		}
		if strings.Join(got, " ") != strings.Join(want[filepath.Base(f)], " ") {
			t.Errorf("%s: Warnings(1) paths = %v, want %v", f, got, want[filepath.Base(f)])
		}
	}
}
