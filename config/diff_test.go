package config

import (
	"slices"
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
			delete(c.Pressure.Rules, SignalKVCacheUsage)
			c.Pressure.Rules[SignalFragmentation] = Rule{Degrade: f64(1.2), Shed: f64(1.6), For: 2 * time.Second}
			c.Pressure.Rules[SignalWaiting] = Rule{Shed: f64(9)}
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

func TestRestartOnly(t *testing.T) {
	t.Parallel()
	got := RestartOnly([]string{"server.listen", "server.max_body_bytes", "transport.dial_timeout",
		"fast_breaker.qps", "health_check.interval", "server.drain_delay", "server.max_connections"})
	want := []string{"server.listen", "transport.dial_timeout", "health_check.interval", "server.max_connections"}
	if !slices.Equal(got, want) {
		t.Errorf("RestartOnly() = %v, want %v", got, want)
	}
}
