package config

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

func f64(v float64) *float64 { return &v }

func TestRulesMerge(t *testing.T) {
	t.Parallel()
	defaults := builtin().Pressure.Rules
	tests := []struct {
		name  string
		rules string
		want  map[Signal]Rule
	}{
		{"absent keeps defaults", "", defaults},
		{"null section keeps defaults", "rules: null", defaults},
		{"empty map keeps defaults", "rules: {}", defaults},
		{"a signal replaces its default rule entirely", "rules: {fragmentation: {degrade: 1.3}}", map[Signal]Rule{
			signalFragmentation:  {Degrade: f64(1.3)},
			signalKVCacheUsage:   defaults[signalKVCacheUsage],
			signalAllocRetryRate: defaults[signalAllocRetryRate],
		}},
		{"{} and null remove a rule; new signals add one", "rules: {kv_cache_usage: {}, alloc_retry_rate: null, waiting: {shed: 100}}", map[Signal]Rule{
			signalFragmentation: defaults[signalFragmentation],
			signalWaiting:       {Shed: f64(100)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse([]byte("upstreams: [{url: 'http://a:1'}]\npressure:\n  " + tt.rules + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Pressure.Rules, tt.want) {
				t.Errorf("rules = %s, want %s", fmtRules(c.Pressure.Rules), fmtRules(tt.want))
			}
		})
	}
}

func fmtRules(m map[Signal]Rule) string {
	var b strings.Builder
	for _, s := range Signals() {
		if r, ok := m[s]; ok {
			fmt.Fprintf(&b, "%s:", s)
			for _, v := range []*float64{r.Degrade, r.Shed} {
				if v == nil {
					b.WriteString(" -")
				} else {
					fmt.Fprintf(&b, " %v", *v)
				}
			}
			b.WriteString("; ")
		}
	}
	return b.String()
}

func TestDerivedDefaults(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
upstreams:
  - {url: "http://10.0.0.5:8000/", max_inflight: 2, gpus: ["0"], sources: [{kind: nvml}, {kind: vllm, url: "http://10.0.0.5:8000/metrics"}]}
  - {url: "http://10.0.0.6:8000", max_inflight: 2, min_inflight: 1}
fast_breaker: {qps: 7.5, burst: 0, per_client: {header: X-Api-Key, qps: 0.5}}
hooks: {critical: [{url: /x}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	u := c.Upstreams[0]
	for _, tt := range []struct {
		name string
		got  any
		want any
	}{
		{"name from host:port", u.Name, "10.0.0.5:8000"},
		{"min_inflight left out, clamped", u.MinInflight, 2},
		{"min_inflight written", c.Upstreams[1].MinInflight, 1},
		{"nvml source name", u.Sources[0].Name, "nvml"},
		{"vllm source name", u.Sources[1].Name, "vllm:http://10.0.0.5:8000/metrics"},
		{"global burst 0 → qps rounded up", c.FastBreaker.Burst, 8},
		{"per-client burst left out", c.FastBreaker.PerClient.Burst, 1},
		{"per-client max_clients", c.FastBreaker.PerClient.MaxClients, 10000},
		{"per-client idle_after", c.FastBreaker.PerClient.IdleAfter.String(), "10m0s"},
		{"hook method", c.Hooks.Critical[0].Method, "POST"},
		{"hook timeout", c.Hooks.Critical[0].Timeout.String(), "5s"},
		{"line of a written key", c.Line("upstreams[1].min_inflight"), 4},
		{"line of a left-out key falls back to its parent", c.Line("upstreams[0].min_inflight"), 3},
		{"line of a default", c.Line("queue.max_wait"), 0},
	} {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

// TestValidateBuiltInCode covers configs made or changed in code: no lines,
// no derived names, values no YAML file can hold (NaN).
func TestValidateBuiltInCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(c *Config)
		want   []string
	}{
		{"unchanged", func(*Config) {}, nil},
		{"names are not derived", func(c *Config) {
			c.Upstreams = append(c.Upstreams, Upstream{URL: "http://b:1", MaxInflight: 1, MinInflight: 1})
		}, []string{"config: upstreams[1].name: required"}},
		{"NaN and infinities", func(c *Config) {
			c.Batch.Cut = math.NaN()
			c.Batch.RampStep = math.Inf(1)
			c.FastBreaker.QPS = math.NaN()
			c.Estimate.CharsPerToken = math.Inf(1)
			c.Pressure.Hysteresis = math.NaN()
			c.Pressure.Rules[signalWaiting] = Rule{Degrade: f64(math.NaN()), Shed: f64(math.Inf(1))}
		}, []string{
			"config: fast_breaker.qps: must be a number ≥ 0",
			"config: batch.cut: must be above 0 and below 1, got NaN",
			"config: batch.ramp_step: must be above 0 and at most 1, got +Inf",
			"config: estimate.chars_per_token: must be a positive number, got +Inf",
			"config: pressure.hysteresis: must be a fraction",
			"config: pressure.rules.waiting.degrade: must be a finite number, got NaN",
			"config: pressure.rules.waiting.shed: must be a finite number, got +Inf",
		}},
		{"fragmentation threshold of 1 always fires", func(c *Config) {
			c.Pressure.Rules[signalFragmentation] = Rule{Degrade: f64(1)}
		}, []string{"pressure.rules.fragmentation.degrade: must be above 1"}},
		{"shed only is fine", func(c *Config) {
			c.Pressure.Rules[signalAllocRetryRate] = Rule{Shed: f64(2)}
		}, nil},
		{"empty rule is no rule", func(c *Config) { c.Pressure.Rules[signalWaiting] = Rule{} }, nil},
		{"huge shutdown", func(c *Config) { c.Server.ShutdownTimeout = 2 * 3600e9 }, []string{
			"config: server.shutdown_timeout: drain_delay + shutdown_timeout is 2h0m5s"}},
		{"bad header names", func(c *Config) {
			c.Server.RequestIDHeader = "X Request"
			c.Hooks.Recovered = []Hook{{Method: "GET", URL: "http://h/x", Timeout: 1, Headers: map[string]string{"A:b": "v", "Ok": "a\r\nb"}}}
		}, []string{
			`config: server.request_id_header: must be a valid header name, got "X Request"`,
			`config: hooks.recovered[0].headers: "A:b" is not a valid header name`,
			`config: hooks.recovered[0].headers.Ok: value must not contain CR, LF or NUL`,
		}},
		{"listen addresses", func(c *Config) {
			c.Server.Listen = "8080"
			c.Server.AdminListen = "127.0.0.1:70000"
		}, []string{
			`config: server.listen: must be host:port`,
			`config: server.admin_listen: port must be 0-65535`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := Default()
			c.lines = nil
			tt.change(c)
			before := fmt.Sprintf("%+v", *c)
			err := c.Validate()
			if after := fmt.Sprintf("%+v", *c); after != before {
				t.Errorf("Validate changed the config")
			}
			if tt.want == nil {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.want)
			}
			got := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("Validate() lacks %q; got:\n%s", w, got)
				}
			}
			if n := strings.Count(got, "\n") + 1; n != len(tt.want) {
				t.Errorf("Validate() reports %d problems, want %d:\n%s", n, len(tt.want), got)
			}
		})
	}
}

// TestMergeKeys: explicit keys beat merged ones, and in <<: [*a, *b] the
// keys of a beat those of b, as YAML merge keys say.
func TestMergeKeys(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
upstreams:
  - &a {url: "http://a:1", max_inflight: 10, min_inflight: 2}
  - &b {url: "http://b:1", max_inflight: 20, min_inflight: 3}
  - {<<: [*a, *b], url: "http://c:1"}
`))
	if err != nil {
		t.Fatal(err)
	}
	if u := c.Upstreams[2]; u.URL != "http://c:1" || u.MaxInflight != 10 || u.MinInflight != 2 {
		t.Errorf("merged upstream = %+v, want url http://c:1 and a's window 2..10", u)
	}
}
