package proxy

import (
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/usage"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkMetricsPerRequest is what a served request records on the
// request metrics, as the endpoint picker records it: its queue wait, its
// estimate sent to its pod, the pod's response and usage, its outcome; four
// pods in turn.
func BenchmarkMetricsPerRequest(b *testing.B) {
	m := NewMetrics(prometheus.NewRegistry())
	pods := []string{"pod-0", "pod-1", "pod-2", "pod-3"}
	m.UpstreamsSet(pods, nil)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		pod := pods[i%len(pods)]
		i++
		m.Waited(300, 0)
		m.Sent(pod, 300)
		m.Response(pod, 200)
		m.Usage(pod, usage.Tokens{Prompt: 200, Completion: 100, Known: true})
		m.Outcome(decide.OutcomeServed, time.Millisecond)
	}
}

// BenchmarkGenAIPerRequest is what a served, streamed chat request records
// on the GenAI histograms: its duration, time to first token, time per
// output token and both token counts.
func BenchmarkGenAIPerRequest(b *testing.B) {
	m := NewMetrics(prometheus.NewRegistry())
	start := time.Unix(0, 0)
	first, end := start.Add(80*time.Millisecond), start.Add(2*time.Second)
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		m.genAI(ctx, "chat", true, start, first, end, true, 200, 100)
	}
}
