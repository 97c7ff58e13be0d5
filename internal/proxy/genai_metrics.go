package proxy

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// genAIMetrics are the OpenTelemetry GenAI semantic conventions' metrics
// (semconv v1.41.0: gen_ai.server.request.duration,
// gen_ai.server.time_to_first_token, gen_ai.server.time_per_output_token,
// gen_ai.client.token.usage) as Prometheus histograms on the app's own
// registry, under the names an OTLP-to-Prometheus translation gives them.
// An observation of a sampled trace carries its trace id as an exemplar.
type genAIMetrics struct {
	duration, ttft, tpot, tokens *prometheus.HistogramVec
	// ops holds each operation's series (op → *genAISeries), resolved on
	// its first request: WithLabelValues hashes and looks up its labels
	// under the vector's lock on every call, five times a request. The
	// operations are coretrace.Operation's few.
	ops *sync.Map
}

// genAISeries are one operation's series.
type genAISeries struct {
	duration, ttft, tpot, input, output prometheus.Observer
}

// The conventions' advised bucket boundaries.
var (
	genAIDurationBuckets = []float64{.01, .02, .04, .08, .16, .32, .64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	genAITTFTBuckets     = []float64{.001, .005, .01, .02, .04, .06, .08, .1, .25, .5, .75, 1, 2.5, 5, 7.5, 10}
	genAITPOTBuckets     = []float64{.01, .025, .05, .075, .1, .15, .2, .3, .4, .5, .75, 1, 2.5}
	genAITokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

func newGenAIMetrics(reg prometheus.Registerer) genAIMetrics {
	op := []string{"gen_ai_operation_name"}
	m := genAIMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_request_duration_seconds",
			Help:    "GenAI semantic conventions: time from request received to the pod's response copied to its end, of requests a pod served (200), by operation (chat, text_completion, embeddings).",
			Buckets: genAIDurationBuckets,
		}, op),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_time_to_first_token_seconds",
			Help:    "GenAI semantic conventions: time from request received to the first chunk of a streamed response written to the client (queue wait included), by operation.",
			Buckets: genAITTFTBuckets,
		}, op),
		tpot: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_time_per_output_token_seconds",
			Help:    "GenAI semantic conventions: time after the first chunk per further output token of a streamed response (its usage's completion tokens), by operation.",
			Buckets: genAITPOTBuckets,
		}, op),
		tokens: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_client_token_usage",
			Help:    "GenAI semantic conventions: tokens per request a pod's usage reported, by operation and gen_ai_token_type (input, output).",
			Buckets: genAITokenBuckets,
		}, []string{"gen_ai_operation_name", "gen_ai_token_type"}),
	}
	reg.MustRegister(m.duration, m.ttft, m.tpot, m.tokens)
	m.ops = new(sync.Map)
	return m
}

// series returns op's series, resolving them on op's first request.
func (m *genAIMetrics) series(op string) *genAISeries {
	if s, ok := m.ops.Load(op); ok {
		return s.(*genAISeries)
	}
	s := &genAISeries{duration: m.duration.WithLabelValues(op), ttft: m.ttft.WithLabelValues(op),
		tpot: m.tpot.WithLabelValues(op), input: m.tokens.WithLabelValues(op, "input"),
		output: m.tokens.WithLabelValues(op, "output")}
	actual, _ := m.ops.LoadOrStore(op, s)
	return actual.(*genAISeries)
}

// genAI records a served request in the GenAI shape: op is its operation
// ("" records nothing), start when it arrived, first when its first body
// chunk went out (zero if none), end when its body was copied; prompt and
// completion its usage when known. ctx carries its span, if sampled.
func (m *Metrics) genAI(ctx context.Context, op string, stream bool, start, first, end time.Time, known bool, prompt, completion int64) {
	if m == nil || op == "" {
		return
	}
	g := m.genai.series(op)
	observe(ctx, g.duration, end.Sub(start).Seconds())
	if stream && !first.IsZero() {
		observe(ctx, g.ttft, first.Sub(start).Seconds())
		if known && completion > 1 {
			observe(ctx, g.tpot, end.Sub(first).Seconds()/float64(completion-1))
		}
	}
	if known {
		observe(ctx, g.input, float64(prompt))
		observe(ctx, g.output, float64(completion))
	}
}

// observe records v, with the trace id as its exemplar when ctx's span is
// sampled.
func observe(ctx context.Context, o prometheus.Observer, v float64) {
	sc := trace.SpanContextFromContext(ctx)
	if e, ok := o.(prometheus.ExemplarObserver); ok && sc.IsSampled() {
		e.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String(), "span_id": sc.SpanID().String()})
		return
	}
	o.Observe(v)
}
