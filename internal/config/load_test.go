package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadGoodFiles(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.good.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no good files: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			c, err := LoadFile(f)
			if err != nil {
				t.Fatalf("LoadFile(%s) = %v, want no error", f, err)
			}
			if err := c.Validate(); err != nil {
				t.Errorf("Validate() of a loaded config = %v, want nil", err)
			}
		})
	}
}

// badFiles pairs every testdata/*.bad.yaml with substrings its error must
// hold, in order: each problem with its path and, from a file, its line.
var badFiles = map[string][]string{
	"tls.bad.yaml": {
		`config: line 3: server.max_concurrent_streams: `,
		`config: line 4: server.tls.key_file: is required with server.tls`,
		`config: line 6: server.h2c: is for a plaintext listener; with server.tls HTTP/2 is negotiated (ALPN), leave h2c out`,
	},
	"unknown-key.bad.yaml": {`config: line 4: unknown key "lisen" in server (did you mean "listen"?)`},
	"unknown-top.bad.yaml": {`config: line 1: unknown key "upstream" at top level (did you mean "upstreams"?)`},
	"unknown-nested.bad.yaml": {
		`line 4: unknown key "interval" in upstreams[0].sources[0]`,
		`line 7: unknown key "critical" in pressure.rules.fragmentation`,
	},
	"bad-duration.bad.yaml": {
		`config: line 4: server.drain_delay: invalid duration "5"`,
		`line 5: server.shutdown_timeout: invalid duration "30 seconds"`,
		`line 7: pressure.interval: want a duration such as 500ms or 30s, got a list`,
	},
	"many.bad.yaml": {
		`line 1: mode: must be one of [enforce observe], got "enforcing"`,
		`line 6: upstreams[1].url: scheme must be http or https`,
		`line 7: upstreams[1].max_inflight: must be at least 1, got 0`,
		`line 9: batch.cut: must be above 0 and below 1, got 1.5`,
		`line 10: batch.ramp_step: must be above 0 and at most 1, got 0`,
		`line 11: queue.starvation_after: must be shorter than queue.max_wait (5s)`,
		`line 12: queue.max_length: must be at least 1, got 0`,
		`line 15: log.level: must be one of [debug info warn error], got "verbose"`,
	},
	"bad-url.bad.yaml": {
		`line 2: upstreams[0].url: must not have a ?query`,
		`line 3: upstreams[1].url: host is missing`,
		`line 4: upstreams[2].url: port must be 1-65535`,
		`line 5: upstreams[3].url: must not carry credentials`,
		`line 6: upstreams[4].url: required`,
		`line 9: hooks.degraded[0].url: scheme must be http or https, got "ftp://allocator/x"`,
		`line 9: hooks.degraded[1].url: scheme must be http or https, got "//no-scheme/x"`,
	},
	"bad-enum.bad.yaml": {
		`line 1: mode: must be one of`,
		`line 4: upstreams[0].sources[0].kind: must be one of [nvml vllm dcgm memory_blocks], got "prometheus"`,
		`line 6: pressure.on_stale: must be one of [degrade hold ignore], got "panic"`,
		`line 8: log.level: must be one of`,
		`line 10: hooks.degraded[0].method: must be one of [GET POST PUT PATCH DELETE], got "post"`,
	},
	"shed-le-degrade.bad.yaml": {
		`line 5: pressure.rules.fragmentation.shed: must be above degrade (1.5), got 1.5`,
		`line 6: pressure.rules.memory_used.shed: must be a fraction above 0 and at most 1, got 1.2`,
		`line 7: pressure.rules.kv_cache_usage.shed: must be above degrade (0.97), got 0.9`,
		`line 8: pressure.rules.gpu_temperature: unknown signal`,
		`line 9: pressure.rules.waiting.degrade: must be positive, got -1`,
	},
	"duplicate-names.bad.yaml": {
		`line 3: upstreams[1].name: "vllm" is already the name of upstreams[0]`,
		`line 4: upstreams[2].url: "http://10.0.0.1:8000" is already the url of upstreams[0]`,
		`line 6: upstreams[3].gpus[1]: "0" is listed twice`,
		`line 10: pressure.sources[0].name: "nvml" is already the name of upstreams[3].sources[0]`,
	},
	"empty-upstreams.bad.yaml": {`config: line 2: upstreams: at least one upstream is required`},
	"empty.bad.yaml":           {`config: upstreams: at least one upstream is required`},
	"sources.bad.yaml": {
		`line 4: upstreams[0].sources[0].url: nvml reads the local GPUs and takes no url`,
		`line 4: upstreams[0].sources[0].kind: nvml reads every GPU of the node; list this pod's GPU ids in upstreams[0].gpus`,
		`line 5: upstreams[0].sources[1].url: required`,
		`line 6: upstreams[0].sources[2].timeout: must not exceed pressure.stale_after (2s)`,
		`line 9: pressure.sources[0].kind: vllm metrics belong to one pod`,
	},
	"duplicate-key.bad.yaml": {`config: line 5: server.listen: duplicate key`},
	"wrong-type.bad.yaml": {
		`line 1: upstreams: want a list, got "http://127.0.0.1:8000"`,
		`line 3: fast_breaker.qps: want a number, got "fast"`,
		`line 4: fast_breaker.burst: want an integer, got "1.5"`,
		`line 5: server: want a mapping, got a list`,
	},
	"classes.bad.yaml": {
		`line 3: classes.header: must be a valid header name, got "bad header"`,
		`line 4: classes.default: must name a listed class, got "missing"`,
		`line 6: classes.list[0].routes[0]: must be a path starting with /, got "v1/embeddings"`,
		`line 6: classes.list[0].client_keys[0]: must be "sha256:" and 64 hex digits, got "md5:abc"`,
		`line 6: classes.list[0].client_keys: needs fast_breaker.per_client.header`,
		`line 6: classes.list[0].qps: must be a number ≥ 0`,
		`line 7: classes.list[1].name: "a" is listed twice`,
	},
	"fairness.bad.yaml": {
		`fairness.tenant_header: is required without fast_breaker.per_client.header`,
		`line 3: fairness.input_weight: must be a number > 0 and ≤ 1e6, got -1`,
		`line 4: fairness.max_tenants: must be at least 1`,
		`line 5: fairness.tenants: min_shares sum to 1.3; they must sum to at most 1`,
		`line 6: fairness.tenants[0].name: "other" is what metrics call the unnamed tenants`,
		`line 6: fairness.tenants[0].weight: must be a number > 0 and ≤ 1e6, got 0`,
		`line 7: fairness.tenants[1].name: must not be empty`,
		`line 7: fairness.tenants[1].key: must be "sha256:" and 64 hex digits, got "md5:abc"`,
		`line 8: fairness.tenants[2].min_share: must not exceed max_share (0.5), got 0.7`,
		`line 9: fairness.tenants[3].max_share: must be a number > 0 and ≤ 1, got 0`,
		`line 10: fairness.default_max_share: must be a number > 0 and ≤ 1, got 1.5`,
		`line 12: quotas.mode: `,
		`line 13: quotas.per_client: needs fast_breaker.per_client.header`,
		`line 13: quotas.per_client.tokens_per_minute: must not be negative`,
		`line 14: quotas.classes.batch: must name a class of classes.list, got "batch"`,
	},
	"routing.bad.yaml": {
		`config: line 4: routing.scorers.prefix: must be a finite number ≥ 0, got -1`,
		`config: line 5: routing.scorers.load: must be a finite number ≥ 0, got NaN`,
		`config: line 6: routing.scorers.kv_cache: want a number, got "two"`,
		`config: line 7: routing.scorers.memory: must be a finite number ≥ 0, got +Inf`,
		`config: line 8: routing.prefix_capacity_blocks: must be at least 1, got 0`,
		`config: line 9: unknown key "prefix_cache" in routing`,
	},
	"scaling.bad.yaml": {
		`config: line 3: scaling.interval: must be at least 1s, got 10ms`,
		`config: line 4: scaling.pod_start_time: must be at least scaling.interval (10ms), got 5ms`,
		`config: line 6: scaling.max_replicas: must be at least scaling.min_replicas (4), got 2`,
		`config: line 7: scaling.stabilization: must not be negative, got -1s`,
		`config: line 8: scaling.target_utilization: must be within (0, 1] (0: the default), got 1.5`,
		`config: line 9: scaling.pod_rate: must be a finite number ≥ 0, got -2`,
		`config: line 10: scaling.alpha: must be within (0, 1] (0: the default), got 2`,
		`config: line 11: scaling.beta: must be within (0, 1] (0: the default), got -0.1`,
	},
	"tracing.bad.yaml": {
		`config: line 3: tracing.protocol: must be one of [grpc http], got "udp"`,
		`config: line 4: tracing.sample_ratio: must be within [0, 1], got 1.5`,
	},
	"cluster.bad.yaml": {
		`config: line 4: cluster.redis.url: must be a redis://, rediss:// or unix:// URL, got "http://redis:6379/0"`,
		`config: line 5: cluster.redis.ca_file: needs a rediss:// url`,
		`config: line 6: cluster.timeout: must be 0 (5ms) or at most 1s, got 2s`,
		`config: line 7: cluster.lease_ttl: must be at least 3 × cluster.heartbeat (1s), got 2s`,
		`config: line 9: cluster.replicas: must be 0 (1) or more, got -2`,
	},
	"cluster-negative.bad.yaml": {
		`config: line 3: cluster.redis.url: is required (redis://host:port/db)`,
		`config: line 5: cluster.timeout: must be 0 (5ms) or at most 1s, got -5ms`,
		`config: line 6: cluster.lease_ttl: must not be negative, got -10s`,
		`config: line 7: cluster.heartbeat: must not be negative, got -1s`,
	},
	"deadlines.bad.yaml": {
		`line 2: queue.order: must be one of [shortest_first earliest_deadline], got "fastest"`,
		`line 2: queue.ttft_deadline: must not be negative (0: none), got -20s`,
		`line 2: queue.deadline_header: must be a valid header name or empty, got "x slo"`,
		`line 3: batch.failure_hold: must not be negative (0: for as long as gatekeeper runs), got -1s`,
		`line 8: classes.list[1].ttft_deadline: must not be negative (0: queue.ttft_deadline), got -2s`,
	},
	// YAML syntax errors name the line the problem is on (issue 35, item
	// 13: yaml.v3's own message is a line early for these three).
	"syntax.bad.yaml":   {`config: line 3: invalid YAML: did not find expected key`},
	"tab.bad.yaml":      {`config: line 5: invalid YAML: found a tab character that violates indentation`},
	"unclosed.bad.yaml": {`config: line 4: invalid YAML: did not find expected ',' or '}'`},
	"two-docs.bad.yaml": {`config: line 2: more than one YAML document`},
	"bounds.bad.yaml": {
		`line 2: upstreams[0].min_inflight: must not exceed max_inflight (8), got 16`,
		`line 3: server.admin_listen: must differ from server.listen`,
		`line 3: server.max_body_bytes: must be at least 1, got -1`,
		`line 3: server.drain_delay: must not be negative, got -1s`,
		`line 4: health_check.path: must start with /`,
		`line 4: health_check.timeout: must not exceed health_check.interval (1s), got 2s`,
		`line 4: health_check.unhealthy_after: must be at least 1, got 0`,
		`line 5: pressure.stale_after: must be longer than pressure.interval (2s), got 2s`,
		`line 5: pressure.hysteresis: must be a fraction ≥ 0 and below 1, got 1.5`,
		`line 5: pressure.hold: must not be negative`,
		`line 7: fast_breaker.qps: must be a number ≥ 0`,
		`line 8: fast_breaker.per_client.header: must be a valid header name, got ""`,
		`line 8: fast_breaker.per_client.qps: must be a positive number, got 0`,
		`line 9: queue.max_tokens: must be at least 1, got 0`,
		`line 9: queue.starvation_after: must be shorter than queue.max_wait (10s)`,
		`line 10: estimate.chars_per_token: must be a positive number, got 0`,
		`line 10: estimate.default_max_tokens: must be at least 1, got 0`,
		`line 10: estimate.prompt_logprobs_chunk: must be at least 1, got -1`,
		`line 11: shed.retry_after: must be at least 1s`,
		`line 12: upstream_breaker.failures: must be at least 1, got 0`,
		`line 12: upstream_breaker.open_for: must be positive, got 0s`,
		`line 12: upstream_breaker.half_open_requests: must be at least 1, got 0`,
		`line 13: transport.idle_conn_timeout: must be positive, got 0s`,
		`line 13: transport.max_idle_conns_per_host: must be at least 1, got 0`,
		`line 14: batch.worse_by: must be above 0 and below 1, got 1.5`,
	},
}

func TestLoadBadFiles(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := badFiles[filepath.Base(f)]; !ok {
			t.Errorf("%s has no entry in badFiles", f)
		}
	}
	for name, want := range badFiles {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := LoadFile(filepath.Join("testdata", name))
			if err == nil {
				t.Fatalf("LoadFile(%s) = %+v, nil; want an error", name, c)
			}
			got, rest := err.Error(), err.Error()
			for _, w := range want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("LoadFile(%s) error lacks (in order) %q; got:\n%s", name, w, got)
				}
				rest = rest[i+len(w):]
			}
			if n := strings.Count(got, "\n") + 1; n > len(want)+2 {
				t.Errorf("LoadFile(%s) reports %d problems, want about %d:\n%s", name, n, len(want), got)
			}
		})
	}
}

func TestFieldErrorsAreJoined(t *testing.T) {
	t.Parallel()
	_, err := LoadFile("testdata/many.bad.yaml")
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("Load error %T is not a joined error", err)
	}
	for _, e := range joined.Unwrap() {
		var fe *FieldError
		if !errors.As(e, &fe) || fe.Line == 0 || fe.Path == "" {
			t.Errorf("problem %q: want a *FieldError with a path and a line", e)
		}
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Path != "mode" || fe.Line != 1 {
		t.Errorf("errors.As(err) = %+v, want the mode problem at line 1", fe)
	}
}

func TestLoadLimits(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("#"), maxFileBytes+1)
	if _, err := Load(bytes.NewReader(big)); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load(%d bytes) = %v, want a size error", len(big), err)
	}
	if _, err := LoadFile(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadFile(missing) = %v, want ErrNotExist", err)
	}
	// A billion-laughs style file (merge keys of merge keys) must stop.
	var b strings.Builder
	b.WriteString("upstreams:\n  - &a {url: 'http://a:1'}\n")
	prev := "a"
	for i := range 12 {
		name := string(rune('b' + i))
		b.WriteString("  - &" + name + " {<<: [" + strings.Repeat("*"+prev+", ", 9) + "*" + prev + "]}\n")
		prev = name
	}
	_, err := Parse([]byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "more than 1024 merges") {
		t.Errorf("Parse(alias bomb) = %v, want a too many merges error", err)
	}
}

// TestLoadPprof covers the one boolean policy switch: off by default, on
// when written, and a non-boolean is an error naming the key.
func TestLoadPprof(t *testing.T) {
	t.Parallel()
	const pod = "upstreams: [{url: 'http://a:1'}]\n"
	tests := []struct {
		name    string
		yaml    string
		want    bool
		wantErr string
	}{
		{"default", pod, false, ""},
		{"on", pod + "server: {pprof: true}\n", true, ""},
		{"off", pod + "server: {pprof: false}\n", false, ""},
		{"not a bool", pod + "server: {pprof: enabled}\n", false, "server.pprof: want true or false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := parseCase(t, tt.yaml, tt.wantErr)
			if c == nil {
				return
			}
			if c.Server.Pprof != tt.want {
				t.Errorf("Parse(%q).Server.Pprof = %v, want %v", tt.yaml, c.Server.Pprof, tt.want)
			}
		})
	}
	c, err := LoadFile("testdata/full.good.yaml")
	if err != nil || !c.Server.Pprof {
		t.Errorf("LoadFile(full.good.yaml) pprof = %v, %v; want true", c != nil && c.Server.Pprof, err)
	}
}

// parseCase parses yaml; with wantErr set it expects an error containing it
// and returns nil, otherwise it expects none and returns the config.
func parseCase(t *testing.T, yaml, wantErr string) *Config {
	t.Helper()
	c, err := Parse([]byte(yaml))
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("Parse(%q) = %v, want an error with %q", yaml, err, wantErr)
		}
		return nil
	}
	if err != nil {
		t.Fatalf("Parse(%q) = %v", yaml, err)
	}
	return c
}
