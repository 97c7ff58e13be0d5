package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/route"
	"github.com/gatekeeper-dev/gatekeeper/sim"
	"github.com/gatekeeper-dev/gatekeeper/sim/replay"
)

func TestApplyPolicyMapsEveryKey(t *testing.T) {
	c, err := config.Parse([]byte(`
upstreams:
  - name: a
    url: "http://127.0.0.1:1"
    max_inflight: 64
    min_inflight: 2
    vocab_size: 1000
    sources:
      - {kind: memory_blocks, url: "http://127.0.0.1:8001/memory_blocks"}
      - {kind: vllm, url: "http://127.0.0.1:1/metrics"}
  - {name: b, url: "http://127.0.0.1:2", max_inflight: 8, min_inflight: 1, gpus: ["1"], sources: [{kind: dcgm, url: "http://b:9400/metrics"}]}
pressure:
  sources: [{kind: nvml}, {kind: dcgm, url: "http://127.0.0.1:9400/metrics"}]
  interval: 250ms
  on_stale: hold
  hysteresis: 0.1
  hold: 7s
  rules:
    memory_used: {degrade: 0.9, shed: 0.97}
    fragmentation: {degrade: 1.5, shed: 2.0, for: 1s}
    waiting: {shed: 50}
fast_breaker: {qps: 12, burst: 3}
batch: {cut: 0.5, cut_every: 3s, worse_by: 0.03, ramp_step: 0.25, ramp_every: 2s, memory_share: 0.5}
estimate: {bytes_per_logit: 40, prompt_logprobs_chunk: 2048}
queue: {max_length: 10, max_tokens: 5000, max_wait: 9s, starvation_after: 4s, order: earliest_deadline, ttft_deadline: 3s}
shed: {retry_after: 6s}
hooks:
  degraded:
    - {url: "http://127.0.0.1:8001/v1/internal/empty_cache"}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := replay.WithPolicy(c, replay.Settings{Policy: replay.Gatekeeper, MaxWait: time.Hour})
	want := replay.Settings{
		Policy:  replay.Gatekeeper,
		Limiter: breaker.LimiterSettings{QPS: 12, Burst: 3},
		Slow: breaker.SlowSettings{
			Level: breaker.LevelSettings{
				// config.Signals order, not the file's; a shed-only rule
				// degrades just below its shed value, as in cmd/gatekeeper.
				Rules: []breaker.Rule{
					{Signal: "fragmentation", Degrade: 1.5, Shed: 2.0, For: time.Second},
					{Signal: "kv_cache_usage", Degrade: 0.95}, // the default file's, merged
					{Signal: "memory_used", Degrade: 0.9, Shed: 0.97},
					{Signal: "waiting", Degrade: math.Nextafter(50, 0), Shed: 50},
					{Signal: "alloc_retry_rate", Degrade: 0.01},                        // the default file's
					{Signal: control.PodOverload, Degrade: control.PodOverloadAnswers}, // built in: a pod's own 503/429
				},
				Hysteresis: 0.1, Hold: 7 * time.Second, OnStale: breaker.StaleHold,
			},
			// the window's top is the replayed pod's max_num_seqs (0)
			Window: breaker.WindowSettings{MinInflight: 2, Cut: 0.5, CutEvery: 3 * time.Second, Worsening: 0.03,
				RampStep: 0.25, RampEvery: 2 * time.Second},
			QueueSignal: "waiting",
		},
		Memory:               control.Memory{VocabSize: 1000, Share: 0.5},
		BytesPerLogit:        40,
		PromptLogprobsChunk:  2048,
		Queue:                queue.Settings{MaxLength: 10, MaxTokens: 5000, StarvationAfter: 4 * time.Second},
		MaxWait:              9 * time.Second,
		RetryAfter:           6 * time.Second,
		TTFTDeadline:         3 * time.Second,
		DeadlineOrder:        true,
		Interval:             250 * time.Millisecond,
		StaleAfter:           2 * time.Second, // the policy file's default stale_after
		EmptyCacheOnDegraded: true,
		Weights:              &route.Weights{Prefix: 1, Load: 2, KV: 2, Memory: 2}, // the default file's routing.scorers
		// the first upstream's sources and the node's, each kind once; b's
		// own dcgm source is not the replayed pod's
		Sources: []pressure.Kind{pressure.KindMemoryBlocks, pressure.KindVLLM, pressure.KindNVML, pressure.KindDCGM},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("replay.WithPolicy =\n%+v\nwant\n%+v", got, want)
	}
}

func TestApplyPolicyEdgeCases(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		check      func(replay.Settings) bool
	}{
		{"qps 0 turns the limiter off", "fast_breaker: {qps: 0}\n", func(s replay.Settings) bool { return s.LimiterOff }},
		{"other hooks are not empty_cache", "hooks: {degraded: [{url: \"http://x:1/reset_prefix_cache\"}], critical: [{method: DELETE, url: \"http://x:1/v1/internal/empty_cache\"}]}\n",
			func(s replay.Settings) bool { return !s.EmptyCacheOnDegraded }},
		{"a critical empty_cache hook on the exporter counts",
			"upstreams: [{name: a, url: \"http://127.0.0.1:1\", sources: [{kind: memory_blocks, url: \"http://127.0.0.1:8001/memory_blocks\"}]}]\n" +
				"hooks: {critical: [{url: \"http://127.0.0.1:8001/v1/internal/empty_cache\"}]}\n",
			func(s replay.Settings) bool { return s.EmptyCacheOnDegraded }},
		{"a path counts where the pod serves the allocator endpoint (vllm-sim)",
			"upstreams: [{name: a, url: \"http://127.0.0.1:1\", sources: [{kind: memory_blocks, url: \"http://127.0.0.1:1/v1/internal/metrics\"}]}]\n" +
				"hooks: {critical: [{url: \"/v1/internal/empty_cache\"}]}\n",
			func(s replay.Settings) bool { return s.EmptyCacheOnDegraded }},
		{"a path on a plain vLLM does not: it would answer 404", "hooks: {critical: [{url: \"/v1/internal/empty_cache\"}]}\n",
			func(s replay.Settings) bool { return !s.EmptyCacheOnDegraded }},
		{"nor a hook on the exporter without its source", "hooks: {critical: [{url: \"http://127.0.0.1:8001/v1/internal/empty_cache\"}]}\n",
			func(s replay.Settings) bool { return !s.EmptyCacheOnDegraded }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := tc.yaml
			if !strings.HasPrefix(doc, "upstreams:") {
				doc = "upstreams: [{name: a, url: \"http://127.0.0.1:1\"}]\n" + doc
			}
			c, err := config.Parse([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			if s := replay.WithPolicy(c, replay.Settings{}); !tc.check(s) {
				t.Fatalf("replay.WithPolicy(%q) = %+v", tc.yaml, s)
			}
		})
	}
}

// The replay's built-in gatekeeper policy is config.yaml's: replaying
// config.Default() gives the same figures.
func TestDefaultPolicyIsTheReplayDefault(t *testing.T) {
	t.Parallel()
	g, _ := sim.GPUByName("H100-80G")
	base := replay.Settings{Engine: sim.Settings{GPU: g}, Policy: replay.Gatekeeper,
		Trace: replay.TraceSettings{Duration: 3 * time.Minute, Seed: 4}}
	a, err := replay.Run(base)
	if err != nil {
		t.Fatal(err)
	}
	b, err := replay.Run(replay.WithPolicy(config.Default(), base))
	if err != nil {
		t.Fatal(err)
	}
	a.Wall, b.Wall = 0, 0
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("built-in defaults:\n%+v\nconfig.Default():\n%+v", a, b)
	}
	if a.Outcomes.Served == 0 {
		t.Fatal("nothing served: the comparison proves nothing")
	}
}

func TestReplayPolicyFlag(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	const up = "upstreams: [{name: a, url: \"http://127.0.0.1:1\"}]\n"
	if err := os.WriteFile(file, []byte(up+"fast_breaker: {qps: 7, burst: 2}\nqueue: {max_wait: 15s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := parseReplayFlags([]string{"-policy", file, "-qps-burst", "9"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	// The file's qps and max_wait; the command line's burst wins.
	if o.base.Limiter.QPS != 7 || o.base.Limiter.Burst != 9 || o.base.MaxWait != 15*time.Second {
		t.Fatalf("settings = %+v", o.base)
	}
	// -memory-share and -failure-hold win over the file too (the fit of sim/replay/README.md).
	if err := os.WriteFile(file, []byte(up+"batch: {memory_share: 0.8, failure_hold: 1m}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err = parseReplayFlags([]string{"-policy", file, "-memory-share", "0.4", "-failure-hold", "5m"}, &bytes.Buffer{})
	if err != nil || o.base.Memory.Share != 0.4 || o.base.Slow.Window.FailureHold != 5*time.Minute {
		t.Fatalf("settings = %+v, %v; want the flags' memory share and failure hold", o.base, err)
	}
	if err := os.WriteFile(file, []byte(up+"fast_breaker: {qps: -1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := parseReplayFlags([]string{"-policy", file}, &bytes.Buffer{}); err == nil {
		t.Fatal("an invalid policy file was accepted")
	}
}

// The README's what-if policies load and change only what they say.
func TestTestdataPolicies(t *testing.T) {
	for _, tc := range []struct {
		file      string
		emptyHook bool
	}{
		{"testdata/frag-1.5.yaml", false},
		{"testdata/frag-1.5-empty-cache.yaml", true},
	} {
		c, err := config.LoadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		got := replay.WithPolicy(c, replay.Settings{})
		want := replay.WithPolicy(config.Default(), replay.Settings{})
		want.Slow.Level.Rules[0] = breaker.Rule{Signal: "fragmentation", Degrade: 1.5, Shed: 2.0}
		want.EmptyCacheOnDegraded = tc.emptyHook
		want.Sources = []pressure.Kind{pressure.KindVLLM, pressure.KindMemoryBlocks} // the allocator exporter
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n%+v\nwant\n%+v", tc.file, got, want)
		}
	}
}

// high-util.yaml keeps config.yaml's rules (no memory_used rule, allocation
// retries cut the batch) and turns the flush hook on.
func TestHighUtilPolicy(t *testing.T) {
	c, err := config.LoadFile("testdata/high-util.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := replay.WithPolicy(c, replay.Settings{})
	signals := map[string]breaker.Rule{}
	for _, r := range got.Slow.Level.Rules {
		signals[r.Signal] = r
	}
	if _, ok := signals["memory_used"]; ok {
		t.Errorf("rules %+v keep memory_used", got.Slow.Level.Rules)
	}
	if r := signals["alloc_retry_rate"]; r.Degrade != 0.01 {
		t.Errorf("alloc_retry_rate rule %+v, want degrade 0.01", r)
	}
	if r := signals["fragmentation"]; r.Degrade != 1.2 || r.Shed != 1.5 {
		t.Errorf("fragmentation rule %+v, want the default 1.2 / 1.5", r)
	}
	if !got.EmptyCacheOnDegraded {
		t.Error("the empty_cache hook is off")
	}
}

// The H100-defaults policies load; the memory ones turn memory admission
// on for Llama 3. (Their max_inflight of 1024 is the H100 pod's
// max_num_seqs, which the replay takes from the pod.)
func TestH100DefaultsPolicies(t *testing.T) {
	for _, tc := range []struct {
		file  string
		vocab int64
	}{
		{"testdata/h100-defaults.yaml", 0},
		{"testdata/memory-h100-defaults.yaml", 128256},
		{"testdata/memory.yaml", 128256},
	} {
		c, err := config.LoadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		got := replay.WithPolicy(c, replay.Settings{})
		if got.Memory.VocabSize != tc.vocab || got.Slow.Window.MaxInflight != 0 {
			t.Errorf("%s: vocab %d, window %d", tc.file, got.Memory.VocabSize, got.Slow.Window.MaxInflight)
		}
	}
}
