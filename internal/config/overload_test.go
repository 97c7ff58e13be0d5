package config

import (
	"testing"
	"time"
)

// TestLoadOverload covers server.overload (issue 38): its defaults, 0 to
// turn each guard off, and values refused with their key.
func TestLoadOverload(t *testing.T) {
	t.Parallel()
	const pod = "upstreams: [{url: 'http://a:1'}]\n"
	tests := []struct {
		name    string
		yaml    string
		want    Overload
		wantErr string
	}{
		{"default: off", pod, Overload{}, ""},
		{"written", pod + "server: {overload: {sched_delay: 20ms, max_inflight: 5000}}\n", Overload{SchedDelay: 20 * time.Millisecond, MaxInflight: 5000}, ""},
		{"off", pod + "server: {overload: {sched_delay: 0s}}\n", Overload{}, ""},
		{"too fine", pod + "server: {overload: {sched_delay: 10us}}\n", Overload{},
			"server.overload.sched_delay: must be 0 (not watched) or at least 100µs, got 10µs"},
		{"negative bound", pod + "server: {overload: {max_inflight: -1}}\n", Overload{},
			"server.overload.max_inflight: must be at least 0, got -1"},
		{"unknown key", pod + "server: {overload: {delay: 5ms}}\n", Overload{}, "delay"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := parseCase(t, tt.yaml, tt.wantErr)
			if c == nil {
				return
			}
			if c.Server.Overload != tt.want {
				t.Errorf("Parse(%q).Server.Overload = %+v, want %+v", tt.yaml, c.Server.Overload, tt.want)
			}
		})
	}
}
