package demo

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// Curls are the commands the demo suggests to a newcomer, paste-ready: a
// streaming chat completion through gatekeeper at trafficURL, and
// gatekeeper's state and metrics at adminURL.
func Curls(trafficURL, adminURL string) (chat, state, metrics string) {
	chat = fmt.Sprintf(`curl -N %s/v1/chat/completions -H 'Content-Type: application/json' -d '{"model":%q,"stream":true,"max_tokens":64,"messages":[{"role":"user","content":"Why do GPUs run out of memory?"}]}'`,
		trafficURL, Model)
	state = fmt.Sprintf("curl -s %s/admin/state", adminURL)
	metrics = fmt.Sprintf("curl -s %s/metrics | grep -E '^(gatekeeper|vllm)_'", adminURL)
	return chat, state, metrics
}

// Banner is the demo's plain-text greeting: where it listens and the Curls,
// each under a comment line.
func Banner(trafficURL, adminURL string) string {
	chat, state, metrics := Curls(trafficURL, adminURL)
	return fmt.Sprintf("gatekeeper demo: traffic %s, admin %s (Ctrl-C to stop)\n\n# a streaming chat completion through gatekeeper\n%s\n\n# gatekeeper's state: levels, signals, window, queue\n%s\n\n# metrics\n%s\n\n",
		trafficURL, adminURL, chat, state, metrics)
}

// Reading reports whether st holds the pod's readings from both of its
// sources (kv_cache_usage from its /metrics, fragmentation from its
// memory_blocks endpoint) and, when it does, the attributes of the demo's
// "first pressure reading" line: upstream, then each signal present, in
// pressure.Signals order.
func Reading(st pressure.State) ([]slog.Attr, bool) {
	us, _ := st.Upstream(Upstream)
	_, kv := us.Signals[pressure.KVCacheUsage]
	_, frag := us.Signals[pressure.Fragmentation]
	if !kv || !frag {
		return nil, false
	}
	attrs := []slog.Attr{slog.String("upstream", Upstream)}
	for _, sig := range pressure.Signals() {
		if v, ok := us.Signals[sig]; ok {
			attrs = append(attrs, slog.Float64(string(sig), v.Value))
		}
	}
	return attrs, true
}

// Summary is what the load generator's summary lines show of gatekeeper's
// state (sim/load's Settings.State).
type Summary struct {
	Queue      int    // requests waiting in gatekeeper's queue
	QueueOrder string // the queue's order
	// Pod is the demo upstream's state; nil when gatekeeper does not list it.
	Pod *PodSummary
}

// PodSummary is the demo upstream's part of a Summary.
type PodSummary struct {
	Level, Phase     string
	Window, InFlight int
	Signals          map[pressure.Signal]pressure.Value
	// Path is the run so far (peaks, time degraded and critical).
	Path Path
}

// Attrs are s as log attributes: queue and queue_order, then, when the pod is
// listed, its level, phase, window, inflight, fragmentation and
// kv_cache_usage (each signal only when read), then its path:
// peak_fragmentation and peak_kv_cache_usage (when read), time_degraded_s
// and time_critical_s.
func (s Summary) Attrs() []slog.Attr {
	attrs := []slog.Attr{slog.Int("queue", s.Queue), slog.String("queue_order", s.QueueOrder)}
	if p := s.Pod; p != nil {
		attrs = append(attrs, slog.String("level", p.Level), slog.String("phase", p.Phase),
			slog.Int("window", p.Window), slog.Int("inflight", p.InFlight))
		for _, sig := range []pressure.Signal{pressure.Fragmentation, pressure.KVCacheUsage} {
			if v, ok := p.Signals[sig]; ok {
				attrs = append(attrs, slog.Float64(string(sig), v.Value))
			}
		}
		if p.Path.HasFragmentation {
			attrs = append(attrs, slog.Float64("peak_fragmentation", p.Path.PeakFragmentation))
		}
		if p.Path.HasKVCacheUsage {
			attrs = append(attrs, slog.Float64("peak_kv_cache_usage", p.Path.PeakKVCacheUsage))
		}
		// Seconds, as every logged duration (a time.Duration is nanoseconds
		// in JSON), to a tenth: the line is read by eye.
		attrs = append(attrs, slog.Float64("time_degraded_s", p.Path.Degraded.Round(100*time.Millisecond).Seconds()),
			slog.Float64("time_critical_s", p.Path.Critical.Round(100*time.Millisecond).Seconds()))
	}
	return attrs
}
