package coretrace

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/gatekeeper-dev/gatekeeper/internal/classify"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
)

func spanContext(t *testing.T, traceID, spanID string) trace.SpanContext {
	t.Helper()
	tid, err := trace.TraceIDFromHex(traceID)
	if err != nil {
		t.Fatal(err)
	}
	sid, err := trace.SpanIDFromHex(spanID)
	if err != nil {
		t.Fatal(err)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
}

func TestParent(t *testing.T) {
	t.Parallel()
	caller := spanContext(t, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
	client := spanContext(t, "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
	sameTrace := spanContext(t, "4bf92f3577b34da6a3ce929d0e0e4736", "b7ad6b7169203331")
	none := trace.SpanContext{}
	tests := []struct {
		name           string
		caller, client trace.SpanContext
		trust          bool
		parent         trace.SpanContext // none: a new trace
		link           trace.SpanContext // none: no link
	}{
		{"the caller's, the client's a link", caller, client, false, caller, client},
		{"the caller's, trusted or not", caller, client, true, caller, client},
		{"the caller's, the client's of its trace no link", caller, sameTrace, false, caller, none},
		{"a trusted client's", none, client, true, client, none},
		{"an untrusted client's: a link", none, client, false, none, client},
		{"none", none, none, true, none, none},
	}
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	for _, tt := range tests {
		ctx, opts := Parent(context.Background(), tt.caller, tt.client, tt.trust)
		_, span := tracer.Start(ctx, tt.name, opts...)
		span.End()
		sp := rec.Ended()[len(rec.Ended())-1]
		if sp.SpanKind() != trace.SpanKindServer {
			t.Errorf("%s: kind %v, want server", tt.name, sp.SpanKind())
		}
		if got := sp.Parent(); got.TraceID() != tt.parent.TraceID() || got.SpanID() != tt.parent.SpanID() {
			t.Errorf("%s: parent %s/%s, want %s/%s", tt.name, got.TraceID(), got.SpanID(), tt.parent.TraceID(), tt.parent.SpanID())
		}
		var links []trace.SpanContext
		for _, l := range sp.Links() {
			links = append(links, l.SpanContext)
		}
		switch {
		case !tt.link.IsValid() && len(links) != 0, tt.link.IsValid() && (len(links) != 1 || !links[0].Equal(tt.link)):
			t.Errorf("%s: links %v, want %v", tt.name, links, tt.link)
		}
	}
}

func TestEndAdmission(t *testing.T) {
	t.Parallel()
	pod := &pods.Member{Pod: pods.Pod{Name: "pod-0"}}
	req := &decide.Request{Class: &decide.Class{Name: "batch"}, Tenant: "sha256:0011", Tokens: 12, Memory: 3, Waited: 1500 * time.Millisecond}
	tests := []struct {
		name   string
		adm    *decide.Admitted
		rf     *decide.Refusal
		want   map[string]string
		status codes.Code
	}{
		{"admitted", &decide.Admitted{Pod: pod}, nil, map[string]string{"gatekeeper.outcome": "admitted",
			"gatekeeper.upstream": "pod-0", "gatekeeper.level": "elevated", "gatekeeper.window": "8"}, codes.Unset},
		{"refused", nil, &decide.Refusal{Reason: decide.ReasonQueueFull}, map[string]string{"gatekeeper.outcome": "refused",
			"gatekeeper.reason": "queue_full"}, codes.Error},
		{"the client left while queued", nil, nil, map[string]string{"gatekeeper.outcome": "client_closed"}, codes.Unset},
	}
	for _, tt := range tests {
		rec := tracetest.NewSpanRecorder()
		tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
		_, span := StartAdmission(context.Background(), tracer)
		EndAdmission(span, req, tt.adm, tt.rf, func(string) (string, int) { return "elevated", 8 })
		if len(rec.Ended()) != 1 {
			t.Fatalf("%s: %d spans ended, want the admission span", tt.name, len(rec.Ended()))
		}
		sp := rec.Ended()[0]
		got := map[string]string{}
		for _, kv := range sp.Attributes() {
			got[string(kv.Key)] = kv.Value.Emit()
		}
		for k, v := range map[string]string{"gatekeeper.class": "batch", "gatekeeper.tenant": "sha256:0011",
			"gatekeeper.queue.wait": "1.5", "gatekeeper.estimate.tokens": "12", "gatekeeper.estimate.memory": "3"} {
			tt.want[k] = v
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q", tt.name, k, got[k], v)
			}
		}
		if sp.Name() != admissionSpan || sp.Status().Code != tt.status {
			t.Errorf("%s: span %q status %v, want %q %v", tt.name, sp.Name(), sp.Status().Code, admissionSpan, tt.status)
		}
	}
}

func TestOperation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind classify.Kind
		want string
	}{
		{classify.KindChat, "chat"}, {classify.KindResponses, "chat"}, {classify.KindCompletion, "text_completion"},
		{classify.KindEmbedding, "embeddings"}, {classify.KindModels, ""},
	}
	for _, tt := range tests {
		if got := Operation(tt.kind); got != tt.want {
			t.Errorf("Operation(%v) = %q, want %q", tt.kind, got, tt.want)
		}
	}
}
