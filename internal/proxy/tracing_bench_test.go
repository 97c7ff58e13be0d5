package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkTracing is a streamed completion through the Handler over
// loopback with tracing off, at 1 % and at 100 % sampling (the SDK's batch
// processor in front of an exporter that discards): it reports each one's
// p50 and p99 latency side by side (bench/RESULTS.md, issue 27).
func BenchmarkTracing(b *testing.B) {
	const body = `{"model":"m","prompt":"Say hello","max_tokens":16,"stream":true}`
	for _, tt := range []struct {
		name  string
		ratio float64 // < 0: tracing off
	}{{"off", -1}, {"sample=0.01", 0.01}, {"sample=1", 1}} {
		b.Run(tt.name, func(b *testing.B) {
			pod := httptest.NewServer(http.HandlerFunc(loopbackPod))
			b.Cleanup(pod.Close)
			u, _ := url.Parse(pod.URL)
			var extra func(*Options)
			if tt.ratio >= 0 {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()),
					sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(tt.ratio))))
				b.Cleanup(func() { _ = tp.Shutdown(b.Context()) })
				extra = func(o *Options) { o.TracerProvider = tp }
			}
			h, err := newHandler(testOptions{Upstreams: []pods.Pod{{Name: "pod", URL: u}},
				Admission: newFakeAdmission(1<<16, "pod"),
				Metrics:   NewMetrics(prometheus.NewRegistry()), Extra: extra})
			if err != nil {
				b.Fatal(err)
			}
			gk := httptest.NewServer(h)
			b.Cleanup(gk.Close)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8, DisableCompression: true}}
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			for b.Loop() {
				t0 := time.Now()
				resp, err := client.Post(gk.URL+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
