package demo

import (
	"log/slog"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

func TestBanner(t *testing.T) {
	const want = "gatekeeper demo: traffic http://t:1, admin http://a:2 (Ctrl-C to stop)\n\n" +
		"# a streaming chat completion through gatekeeper\n" +
		`curl -N http://t:1/v1/chat/completions -H 'Content-Type: application/json' -d '{"model":"meta-llama/Meta-Llama-3-8B","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"Why do GPUs run out of memory?"}]}'` + "\n\n" +
		"# gatekeeper's state: levels, signals, window, queue\ncurl -s http://a:2/admin/state\n\n" +
		"# metrics\ncurl -s http://a:2/metrics | grep -E '^(gatekeeper|vllm)_'\n\n"
	if got := Banner("http://t:1", "http://a:2"); got != want {
		t.Errorf("Banner() = %q, want %q", got, want)
	}
}

func TestReading(t *testing.T) {
	sigs := func(kv ...pressure.Signal) map[pressure.Signal]pressure.Value {
		m := map[pressure.Signal]pressure.Value{}
		for i, s := range kv {
			m[s] = pressure.Value{Value: float64(i + 1)}
		}
		return m
	}
	tests := []struct {
		name   string
		st     pressure.State
		want   string // the attributes, formatted
		wantOK bool
	}{
		{name: "no upstream"},
		{name: "another upstream", st: pressure.State{Upstreams: []pressure.UpstreamState{
			{Name: "other", Signals: sigs(pressure.KVCacheUsage, pressure.Fragmentation)}}}},
		{name: "kv cache only", st: pressure.State{Upstreams: []pressure.UpstreamState{
			{Name: Upstream, Signals: sigs(pressure.KVCacheUsage, pressure.Waiting)}}}},
		{name: "both sources, in Signals order", st: pressure.State{Upstreams: []pressure.UpstreamState{
			{Name: Upstream, Signals: sigs(pressure.Waiting, pressure.KVCacheUsage, pressure.Fragmentation)}}},
			want: "[upstream=vllm-sim fragmentation=3 kv_cache_usage=2 waiting=1]", wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			attrs, ok := Reading(tt.st)
			if got := format(attrs); ok != tt.wantOK || got != tt.want {
				t.Errorf("Reading() = %s, %v, want %s, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestSummaryAttrs(t *testing.T) {
	tests := []struct {
		name string
		s    Summary
		want string
	}{
		{name: "pod not listed", s: Summary{Queue: 3, QueueOrder: "fifo"}, want: "[queue=3 queue_order=fifo]"},
		{name: "pod without readings", s: Summary{QueueOrder: "fifo", Pod: &PodSummary{Level: "normal", Phase: "steady", Window: 64}},
			want: "[queue=0 queue_order=fifo level=normal phase=steady window=64 inflight=0 time_degraded_s=0 time_critical_s=0]"},
		{name: "pod with readings", s: Summary{Queue: 1, QueueOrder: "shortest_first", Pod: &PodSummary{
			Level: "degraded", Phase: "cut", Window: 32, InFlight: 30, Signals: map[pressure.Signal]pressure.Value{
				pressure.KVCacheUsage: {Value: 0.9}, pressure.Fragmentation: {Value: 0.25}, pressure.Waiting: {Value: 7}},
			Path: Path{PeakFragmentation: 1.025, HasFragmentation: true, PeakKVCacheUsage: 1, HasKVCacheUsage: true, Degraded: 12 * time.Second}}},
			want: "[queue=1 queue_order=shortest_first level=degraded phase=cut window=32 inflight=30 fragmentation=0.25 kv_cache_usage=0.9 " +
				"peak_fragmentation=1.025 peak_kv_cache_usage=1 time_degraded_s=12 time_critical_s=0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := format(tt.s.Attrs()); got != tt.want {
				t.Errorf("%+v.Attrs() = %s, want %s", tt.s, got, tt.want)
			}
		})
	}
}

// format writes attrs as "[k=v ...]", or "" for none.
func format(attrs []slog.Attr) string {
	if attrs == nil {
		return ""
	}
	s := "["
	for i, a := range attrs {
		if i > 0 {
			s += " "
		}
		s += a.String()
	}
	return s + "]"
}
