package config

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDiff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(c *Config)
		want   []string
	}{
		{"same", func(*Config) {}, nil},
		{"scalars", func(c *Config) {
			c.Server.Listen = ":8081"
			c.Queue.MaxWait = time.Minute
			c.Upstreams[0].MaxInflight = 64
		}, []string{"server.listen", "upstreams[0].max_inflight", "queue.max_wait"}},
		{"lists", func(c *Config) {
			c.Upstreams[0].GPUs[0] = "1"
			c.Upstreams[0].Sources = nil
			c.Hooks.Critical = []Hook{{URL: "/x"}}
		}, []string{"upstreams[0].gpus[0]", "upstreams[0].sources", "hooks.critical"}},
		{"rules and optional sections", func(c *Config) {
			delete(c.Pressure.Rules, signalKVCacheUsage)
			c.Pressure.Rules[signalFragmentation] = Rule{Degrade: f64(1.2), Shed: f64(1.6), For: 2 * time.Second}
			c.Pressure.Rules[signalWaiting] = Rule{Shed: f64(9)}
			c.FastBreaker.PerClient = &PerClient{Header: "A"}
		}, []string{"pressure.rules.fragmentation.shed", "pressure.rules.kv_cache_usage",
			"pressure.rules.waiting", "fast_breaker.per_client"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			next := Default()
			tt.change(next)
			if got := Diff(Default(), next); !slices.Equal(got, tt.want) {
				t.Errorf("Diff() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestChanges: each changed key with its old and new values as the file
// writes them, on one line, secrets masked (issue 35: a reload logs what
// it changed, and must not log a hook's or tracing's credentials).
func TestChanges(t *testing.T) {
	t.Parallel()
	base := `
upstreams: [{name: a, url: "http://a:8000", sources: [{kind: vllm, url: "http://a:8000/metrics"}]}]
fast_breaker: {qps: 250, burst: 500}
hooks:
  degraded: [{url: "http://relief:9000/reset?token=s3cret&x=1", headers: {Authorization: "Bearer s3cret"}, body: '{"key":"s3cret"}'}]
tracing: {headers: {api-key: s3cret}}
cluster: {redis: {url: "redis://user:s3cret@redis:6379/0"}}
`
	tests := []struct {
		name string
		next string // replaces in base
		old  string
		want []Change
	}{
		{name: "same", next: "", want: nil},
		{name: "numbers", old: "{qps: 250, burst: 500}", next: "{qps: 80, burst: 40}", want: []Change{
			{"fast_breaker.qps", "250", "80"}, {"fast_breaker.burst", "500", "40"}}},
		{name: "a section added", old: "fast_breaker: {qps: 250, burst: 500}", next: "fast_breaker: {qps: 250, burst: 500}\nqueue: {max_wait: 1m, ttft_deadline: 0s}\nclasses: {default: c, list: [{name: c, routes: [/v1/x]}]}", want: []Change{
			{"queue.max_wait", "30s", "1m"}, {"queue.ttft_deadline", "1500ms", "0s"},
			{"classes", absent, "{header: \"\", default: c, list: [{name: c, priority: 0, routes: [/v1/x], client_keys: [], qps: 0, burst: 0, ttft_deadline: 0s}]}"}}},
		{name: "a rule removed and one changed", old: "fast_breaker:", next: "pressure: {rules: {kv_cache_usage: null, fragmentation: {degrade: 1.3}}}\nfast_breaker:", want: []Change{
			{"pressure.rules.fragmentation.degrade", "1.2", "1.3"}, {"pressure.rules.fragmentation.shed", "1.5", absent},
			{"pressure.rules.fragmentation.for", "2s", "0s"}, {"pressure.rules.kv_cache_usage", "{degrade: 0.95, horizon: 0s, for: 0s}", absent}}},
		{name: "hook headers and body", old: "Bearer s3cret", next: "Bearer n3w", want: []Change{
			{"hooks.degraded[0].headers.Authorization", Redacted, Redacted}}},
		{name: "hook body", old: `'{"key":"s3cret"}'`, next: `""`, want: []Change{
			{"hooks.degraded[0].body", Redacted, `""`}}},
		{name: "a hook added", old: "degraded: [", next: "critical: [{url: \"/x?key=t0k\", headers: {X-Token: t0k}}]\n  degraded: [", want: []Change{
			{"hooks.critical", "[]", "[{method: POST, url: '/x?key=REDACTED', headers: {X-Token: REDACTED}, body: \"\", timeout: 5s}]"}}},
		{name: "tracing headers", old: "api-key: s3cret", next: "api-key: n3w", want: []Change{
			{"tracing.headers.api-key", Redacted, Redacted}}},
		{name: "url credentials and query", old: "s3cret@redis:6379/0", next: "s3cret@redis:6380/0", want: []Change{
			{"cluster.redis.url", "redis://user:REDACTED@redis:6379/0", "redis://user:REDACTED@redis:6380/0"}}},
		{name: "url query", old: "reset?token=s3cret&x=1", next: "reset?token=n3w&x=2", want: []Change{
			{"hooks.degraded[0].url", "http://relief:9000/reset?token=REDACTED&x=REDACTED", "http://relief:9000/reset?token=REDACTED&x=REDACTED"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			old, err := Parse([]byte(base))
			if err != nil {
				t.Fatal(err)
			}
			text := base
			if tt.old != "" {
				if !strings.Contains(base, tt.old) {
					t.Fatalf("base has no %q", tt.old)
				}
				text = strings.Replace(base, tt.old, tt.next, 1)
			}
			next, err := Parse([]byte(text))
			if err != nil {
				t.Fatal(err)
			}
			got := Changes(old, next)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Changes() =\n%q\nwant\n%q", got, tt.want)
			}
			for _, c := range got {
				if strings.Contains(c.Old+c.New, "s3cret") || strings.Contains(c.Old+c.New, "n3w") || strings.Contains(c.Old+c.New, "t0k") {
					t.Errorf("Changes() logs a secret: %+v", c)
				}
			}
		})
	}
}

// TestSecretsTagged: every key whose name says it may hold a credential is
// tagged log:"redact" (so Changes never logs it) or listed here as not
// secret; a new such key fails until it is one or the other.
func TestSecretsTagged(t *testing.T) {
	t.Parallel()
	notSecret := map[string]string{
		"classes.header": "a header name", "fast_breaker.per_client.header": "a header name",
		"server.request_id_header": "a header name", "queue.deadline_header": "a header name",
		"fairness.tenant_header": "a header name", "classes.list[].client_keys": "SHA-256 hashes",
		"fairness.tenants[].key": "a SHA-256 hash", "quotas.clients[].key": "a SHA-256 hash",
		"cluster.key_prefix": "a Redis key prefix",
	}
	looksSecret := regexp.MustCompile(`(?i)token|secret|passw|key|header|auth|cred|cookie|body`)
	stringy := func(t reflect.Type) bool {
		return t.Kind() == reflect.String || (t.Kind() == reflect.Slice || t.Kind() == reflect.Map) && t.Elem().Kind() == reflect.String
	}
	var walk func(path string, t reflect.Type)
	walk = func(path string, typ reflect.Type) {
		for !stringy(typ) && (typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map) {
			if typ.Kind() == reflect.Slice {
				path += "[]"
			}
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct {
			return
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" {
				continue
			}
			p := join(path, name)
			if stringy(f.Type) && looksSecret.MatchString(name) && !strings.HasSuffix(name, "_file") && !redacted(f) && notSecret[p] == "" {
				t.Errorf("%s (%s) may hold a credential: tag it log:\"redact\" or list it in notSecret", p, f.Type)
			}
			walk(p, f.Type)
		}
	}
	walk("", reflect.TypeFor[Config]())
}

func TestRestartOnly(t *testing.T) {
	t.Parallel()
	got := RestartOnly([]string{"server.listen", "server.max_body_bytes", "transport.dial_timeout",
		"fast_breaker.qps", "health_check.interval", "server.drain_delay", "server.max_connections",
		"routing.scorers.prefix", "routing.prefix_capacity_blocks", "server.stream_handoff", "server.h2c"})
	want := []string{"server.listen", "transport.dial_timeout", "health_check.interval", "server.max_connections",
		"routing.prefix_capacity_blocks", "server.stream_handoff", "server.h2c"}
	if !slices.Equal(got, want) {
		t.Errorf("RestartOnly() = %v, want %v", got, want)
	}
}
