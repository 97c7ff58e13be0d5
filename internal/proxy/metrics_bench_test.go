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
