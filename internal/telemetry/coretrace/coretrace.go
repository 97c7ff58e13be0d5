// Package coretrace holds what both fronts (the HTTP proxy and the endpoint
// picker) put on their spans about the decision core's work: the
// gatekeeper.* attribute keys, the parent of a request's server span, the
// gatekeeper.admission span and the GenAI attributes of a request. The
// spans themselves are the fronts'; this package starts and ends only the
// admission span, on the tracer it is handed, and holds no provider.
//
// It reads decide's types and OpenTelemetry's API, never its SDK: the fronts
// stay free of the export pipeline (package telemetry).
package coretrace

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/gatekeeper-dev/gatekeeper/internal/classify"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
)

// The gatekeeper.* span attributes: what the core decided. Never any prompt
// or completion text.
const (
	classKey     = attribute.Key("gatekeeper.class")
	tenantKey    = attribute.Key("gatekeeper.tenant")
	queueWaitKey = attribute.Key("gatekeeper.queue.wait") // seconds
	tokensKey    = attribute.Key("gatekeeper.estimate.tokens")
	memoryKey    = attribute.Key("gatekeeper.estimate.memory")
	UpstreamKey  = attribute.Key("gatekeeper.upstream")
	levelKey     = attribute.Key("gatekeeper.level")
	windowKey    = attribute.Key("gatekeeper.window")
	OutcomeKey   = attribute.Key("gatekeeper.outcome")
	ReasonKey    = attribute.Key("gatekeeper.reason")
	RetriedKey   = attribute.Key("gatekeeper.retried")
	RequestIDKey = attribute.Key("gatekeeper.request_id")
)

// admissionSpan is the name of the span of the admission decision.
const admissionSpan = "gatekeeper.admission"

// PodState returns a pod's pressure level and window, for the admission
// span; nil leaves both out.
type PodState func(pod string) (level string, window int)

// Parent places a request's server span. caller is the trace context of the
// hop that called gatekeeper and is trusted as such (the endpoint picker's
// Envoy, in the ext_proc stream's gRPC metadata); client is the one the
// request itself carries (its traceparent header), which is the parent only
// when trust is set and no caller context is valid. A valid client context
// that is not the parent becomes a link on the span, unless it is of the
// parent's trace already. With no parent the span starts a new trace
// (ctx carries no span of its own). Either context may be the zero
// SpanContext (none).
func Parent(ctx context.Context, caller, client trace.SpanContext, trust bool) (context.Context, []trace.SpanStartOption) {
	parent := caller
	if !parent.IsValid() && trust {
		parent = client
	}
	opts := make([]trace.SpanStartOption, 1, 3) // one allocation, whichever apply
	opts[0] = trace.WithSpanKind(trace.SpanKindServer)
	switch {
	case parent.IsValid():
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	case client.IsValid():
		// Not whatever span ctx may carry either. (Without a client
		// context the option is left out: it costs the SDK two
		// allocations, and the fronts' contexts carry no span.)
		opts = append(opts, trace.WithNewRoot())
	}
	if client.IsValid() && client.TraceID() != parent.TraceID() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: client}))
	}
	return ctx, opts
}

// StartAdmission starts the span of the admission decision (the queue wait
// included) under ctx's span. End it with EndAdmission.
func StartAdmission(ctx context.Context, tracer trace.Tracer) (context.Context, trace.Span) {
	return tracer.Start(ctx, admissionSpan, trace.WithSpanKind(trace.SpanKindInternal))
}

// EndAdmission records what the core decided for req (adm or rf; neither:
// the client left while queued) on span, and ends it. state, if set, adds
// the admitted pod's level and window.
func EndAdmission(span trace.Span, req *decide.Request, adm *decide.Admitted, rf *decide.Refusal, state PodState) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{queueWaitKey.Float64(req.Waited.Seconds()),
		tokensKey.Int64(req.Tokens), memoryKey.Int64(req.Memory)}
	if req.Class != nil {
		attrs = append(attrs, classKey.String(req.Class.Name))
	}
	if req.Tenant != "" {
		attrs = append(attrs, tenantKey.String(req.Tenant))
	}
	switch {
	case rf != nil:
		attrs = append(attrs, OutcomeKey.String("refused"), ReasonKey.String(string(rf.Reason)))
		span.SetStatus(codes.Error, string(rf.Reason))
	case adm == nil:
		attrs = append(attrs, OutcomeKey.String(string(decide.OutcomeClientClosed)))
	default:
		attrs = append(attrs, OutcomeKey.String("admitted"), UpstreamKey.String(adm.Pod.Name))
		if state != nil {
			level, window := state(adm.Pod.Name)
			attrs = append(attrs, levelKey.String(level), windowKey.Int(window))
		}
	}
	span.SetAttributes(attrs...)
}

// Operation is the gen_ai.operation.name of a route's kind ("" for routes
// that are not generative).
func Operation(k classify.Kind) string {
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

// GenAIRequest appends the GenAI attributes of what req asks for (its
// operation, model and output bound; each only when known) to attrs.
func GenAIRequest(attrs []attribute.KeyValue, req *decide.Request) []attribute.KeyValue {
	if op := Operation(req.Kind); op != "" {
		attrs = append(attrs, semconv.GenAIOperationNameKey.String(op))
	}
	if req.Model != "" {
		attrs = append(attrs, semconv.GenAIRequestModel(req.Model))
	}
	if req.MaxTokens > 0 {
		attrs = append(attrs, semconv.GenAIRequestMaxTokens(int(req.MaxTokens)))
	}
	return attrs
}

// Usage records the tokens a response's usage reported on span.
func Usage(span trace.Span, prompt, completion int64) {
	span.SetAttributes(semconv.GenAIUsageInputTokens(int(prompt)), semconv.GenAIUsageOutputTokens(int(completion)))
}
