package proxy

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/decide"
	"github.com/gatekeeper-dev/gatekeeper/proxy/classify"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the handler's spans.
const tracerName = "github.com/gatekeeper-dev/gatekeeper/proxy"

// The gatekeeper.* span attributes: what the admission decided. Never any
// prompt or completion text.
const (
	attrClass     = attribute.Key("gatekeeper.class")
	attrTenant    = attribute.Key("gatekeeper.tenant")
	attrQueueWait = attribute.Key("gatekeeper.queue.wait") // seconds
	attrTokens    = attribute.Key("gatekeeper.estimate.tokens")
	attrMemory    = attribute.Key("gatekeeper.estimate.memory")
	attrUpstream  = attribute.Key("gatekeeper.upstream")
	attrLevel     = attribute.Key("gatekeeper.level")
	attrWindow    = attribute.Key("gatekeeper.window")
	attrOutcome   = attribute.Key("gatekeeper.outcome")
	attrReason    = attribute.Key("gatekeeper.reason")
	attrRetried   = attribute.Key("gatekeeper.retried")
	attrRequestID = attribute.Key("gatekeeper.request_id")
)

// tracing is the handler's part of OpenTelemetry; nil when it traces
// nothing, which costs one nil check per request.
type tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	trust  bool
	state  func(upstream string) (level string, window int)
}

func newTracing(o Options) *tracing {
	if o.TracerProvider == nil {
		return nil
	}
	t := &tracing{tracer: o.TracerProvider.Tracer(tracerName), prop: o.Propagator,
		trust: o.TrustClientContext, state: o.PodState}
	if t.prop == nil {
		t.prop = propagation.TraceContext{}
	}
	return t
}

// startServer starts the inbound server span. A trusted client's
// traceparent is its parent; an untrusted one's becomes a link on a new
// trace.
func (t *tracing) startServer(r *http.Request, route string) (*http.Request, trace.Span) {
	remote := trace.SpanContextFromContext(t.prop.Extract(context.Background(), propagation.HeaderCarrier(r.Header)))
	ctx := r.Context()
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	switch {
	case remote.IsValid() && t.trust:
		ctx = trace.ContextWithRemoteSpanContext(ctx, remote)
	case remote.IsValid():
		opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: remote}))
	}
	name := r.Method
	if route != "" {
		name += " " + route
	}
	ctx, span := t.tracer.Start(ctx, name, opts...)
	if span.IsRecording() {
		span.SetAttributes(semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLPath(r.URL.Path),
			semconv.URLScheme(scheme(r)), semconv.NetworkProtocolVersion(protoVersion(r)),
			semconv.UserAgentOriginal(r.UserAgent()))
		if route != "" {
			span.SetAttributes(semconv.HTTPRoute(route))
		}
		if host, port, err := net.SplitHostPort(r.Host); err == nil {
			p, _ := strconv.Atoi(port)
			span.SetAttributes(semconv.ServerAddress(host), semconv.ServerPort(p))
		}
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			span.SetAttributes(semconv.ClientAddress(host))
		}
	}
	return r.WithContext(ctx), span
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

func protoVersion(r *http.Request) string {
	if r.ProtoMajor == 2 {
		return "2"
	}
	return strconv.Itoa(r.ProtoMajor) + "." + strconv.Itoa(r.ProtoMinor)
}

// endServer records the request's one outcome on its server span.
func endServer(span trace.Span, ex *exchange, o decide.Outcome, status int) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrOutcome.String(string(o)), attrRequestID.String(ex.id))
	if status > 0 && status != decide.StatusClientClosed {
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
	}
	if status >= 500 {
		span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(status)))
		span.SetStatus(codes.Error, string(o))
	}
}

// startAdmission starts the span of the admission decision (the queue wait
// included).
func (t *tracing) startAdmission(ctx context.Context) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, "gatekeeper.admission", trace.WithSpanKind(trace.SpanKindInternal))
}

// endAdmission records what the core decided for ex.
func (t *tracing) endAdmission(span trace.Span, ex *exchange, adm *decide.Admitted, rf *decide.Refusal) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	req := &ex.Request
	attrs := []attribute.KeyValue{attrQueueWait.Float64(req.Waited.Seconds()),
		attrTokens.Int64(req.Tokens), attrMemory.Int64(req.Memory)}
	if req.Class != nil {
		attrs = append(attrs, attrClass.String(req.Class.Name))
	}
	if req.Tenant != "" {
		attrs = append(attrs, attrTenant.String(req.Tenant))
	}
	switch {
	case rf != nil:
		attrs = append(attrs, attrOutcome.String("refused"), attrReason.String(string(rf.Reason)))
		span.SetStatus(codes.Error, string(rf.Reason))
	case adm == nil:
		attrs = append(attrs, attrOutcome.String(string(decide.OutcomeClientClosed)))
	default:
		attrs = append(attrs, attrOutcome.String("admitted"), attrUpstream.String(adm.Pod.Name))
		if t.state != nil {
			level, window := t.state(adm.Pod.Name)
			attrs = append(attrs, attrLevel.String(level), attrWindow.Int(window))
		}
	}
	span.SetAttributes(attrs...)
}

// operation is the gen_ai.operation.name of a route's kind ("" for routes
// that are not generative).
func operation(k classify.Kind) string {
	switch k {
	case classify.KindChat, classify.KindResponses:
		return semconv.GenAIOperationNameChat.Value.AsString()
	case classify.KindCompletion:
		return semconv.GenAIOperationNameTextCompletion.Value.AsString()
	case classify.KindEmbedding:
		return semconv.GenAIOperationNameEmbeddings.Value.AsString()
	}
	return ""
}

// startClient starts the client span of ex's request to its pod, in the
// GenAI shape: "{operation} {model}".
func (t *tracing) startClient(ctx context.Context, ex *exchange) (context.Context, trace.Span) {
	op := operation(ex.Kind)
	name := op
	if name == "" {
		name = ex.r.Method
	}
	if ex.Model != "" {
		name += " " + ex.Model
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	if !span.IsRecording() {
		return ctx, span
	}
	u := ex.member.URL
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(ex.r.Method), attrUpstream.String(ex.member.Name),
		semconv.ServerAddress(u.Hostname()), attrRetried.Bool(ex.retried)}
	if p, err := strconv.Atoi(u.Port()); err == nil {
		attrs = append(attrs, semconv.ServerPort(p))
	}
	if op != "" {
		attrs = append(attrs, semconv.GenAIOperationNameKey.String(op))
	}
	if ex.Model != "" {
		attrs = append(attrs, semconv.GenAIRequestModel(ex.Model))
	}
	if ex.MaxTokens > 0 {
		attrs = append(attrs, semconv.GenAIRequestMaxTokens(int(ex.MaxTokens)))
	}
	span.SetAttributes(attrs...)
	return ctx, span
}

// endClient records what the pod answered on the client span.
func endClient(f *flight, start time.Time) {
	span := f.span
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if f.status != 0 {
		span.SetAttributes(semconv.HTTPResponseStatusCode(f.status))
	}
	if f.used.Known {
		span.SetAttributes(semconv.GenAIUsageInputTokens(int(f.used.Prompt)), semconv.GenAIUsageOutputTokens(int(f.used.Completion)))
	}
	if first := f.out.first; !first.IsZero() && f.ex.Stream {
		span.SetAttributes(semconv.GenAIResponseTimeToFirstChunk(first.Sub(start).Seconds()))
	}
	switch {
	case f.err != nil:
		span.SetAttributes(semconv.ErrorTypeKey.String("transport"))
		span.SetStatus(codes.Error, f.err.Error())
	case f.streamErr:
		span.SetAttributes(semconv.ErrorTypeKey.String("stream_error"))
		span.SetStatus(codes.Error, "the stream carried an error event")
	case f.status >= 500 || f.status == http.StatusTooManyRequests:
		span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(f.status)))
		span.SetStatus(codes.Error, http.StatusText(f.status))
	}
}
