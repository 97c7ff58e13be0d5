package proxy

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/telemetry/coretrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the handler's spans.
const tracerName = "github.com/gatekeeper-dev/gatekeeper/internal/proxy"

// tracing is the handler's part of OpenTelemetry; nil when it traces
// nothing, which costs one nil check per request.
type tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	trust  bool
	state  coretrace.PodState
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
	ctx, opts := coretrace.Parent(r.Context(), trace.SpanContext{}, remote, t.trust)
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
	span.SetAttributes(coretrace.OutcomeKey.String(string(o)), coretrace.RequestIDKey.String(ex.id))
	if status > 0 && status != decide.StatusClientClosed {
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
	}
	if status >= 500 {
		span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(status)))
		span.SetStatus(codes.Error, string(o))
	}
}

// startClient starts the client span of ex's request to its pod, in the
// GenAI shape: "{operation} {model}".
func (t *tracing) startClient(ctx context.Context, ex *exchange) (context.Context, trace.Span) {
	name := coretrace.Operation(ex.Kind)
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
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(ex.r.Method), coretrace.UpstreamKey.String(ex.member.Name),
		semconv.ServerAddress(u.Hostname()), coretrace.RetriedKey.Bool(ex.retried)}
	if p, err := strconv.Atoi(u.Port()); err == nil {
		attrs = append(attrs, semconv.ServerPort(p))
	}
	attrs = coretrace.GenAIRequest(attrs, &ex.Request)
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
		coretrace.Usage(span, f.used.Prompt, f.used.Completion)
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
