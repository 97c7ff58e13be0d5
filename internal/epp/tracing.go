package epp

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	grpcmd "google.golang.org/grpc/metadata"

	"github.com/gatekeeper-dev/gatekeeper/internal/telemetry/coretrace"
)

// tracerName is the instrumentation scope of the picker's spans, the
// Decider's admission span included.
const tracerName = "github.com/gatekeeper-dev/gatekeeper/internal/epp"

// processMethod is the RPC every exchange arrives on: the server span's name
// and its rpc.method.
const processMethod = "envoy.service.ext_proc.v3.ExternalProcessor/Process"

// tracing is the server's part of OpenTelemetry; nil when it traces nothing,
// which costs one nil check per request.
type tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	trust  bool
}

func newTracing(o Options) *tracing {
	if o.TracerProvider == nil {
		return nil
	}
	t := &tracing{tracer: o.TracerProvider.Tracer(tracerName), prop: o.Propagator, trust: o.TrustClientContext}
	if t.prop == nil {
		t.prop = propagation.TraceContext{}
	}
	return t
}

// start starts r's server span. Its parent is Envoy's: the trace context in
// the ext_proc stream's gRPC metadata, which Envoy (1.31 and later, with
// its tracing on) sets to its span of the ext_proc call. The request's own
// traceparent, which Envoy passes on among the request headers as the
// client sent it, is the parent only when trusted and Envoy sent none; else
// it is a link (coretrace.Parent).
func (t *tracing) start(stream context.Context, r *Request) trace.Span {
	var caller trace.SpanContext
	if md, ok := grpcmd.FromIncomingContext(stream); ok {
		caller = trace.SpanContextFromContext(t.prop.Extract(context.Background(), mdCarrier(md)))
	}
	client := trace.SpanContextFromContext(t.prop.Extract(context.Background(), propagation.HeaderCarrier(r.Header)))
	ctx, opts := coretrace.Parent(stream, caller, client, t.trust)
	_, span := t.tracer.Start(ctx, processMethod, opts...)
	if span.IsRecording() {
		path, _, _ := strings.Cut(r.Path, "?")
		span.SetAttributes(semconv.RPCSystemNameGRPC, semconv.RPCMethod(processMethod),
			semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLPath(path))
		if id := r.Header.Get("X-Request-Id"); id != "" {
			span.SetAttributes(coretrace.RequestIDKey.String(id))
		}
	}
	return span
}

// headers is the trace context the pick sets on the request to the pod:
// span's, in place of any the client sent (each field the propagator
// writes, lower-case, its value "" when it has none to write, which
// removes the client's).
func (t *tracing) headers(span trace.Span) [][2]string {
	c := propagation.MapCarrier{}
	t.prop.Inject(trace.ContextWithSpan(context.Background(), span), c)
	fields := t.prop.Fields()
	out := make([][2]string, len(fields))
	for i, f := range fields {
		f = strings.ToLower(f)
		out[i] = [2]string{f, c[f]}
	}
	return out
}

// end records the status the client got (0: none reached it) on span and
// ends it.
func end(span trace.Span, status int) {
	defer span.End()
	if !span.IsRecording() || status <= 0 {
		return
	}
	span.SetAttributes(semconv.HTTPResponseStatusCode(status))
	if status >= 500 {
		span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(status)))
		span.SetStatus(codes.Error, http.StatusText(status))
	}
}

// mdCarrier reads trace context from gRPC metadata, whose keys are
// lower-case.
type mdCarrier grpcmd.MD

func (c mdCarrier) Get(key string) string {
	if v := grpcmd.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { grpcmd.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
