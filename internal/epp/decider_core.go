package epp

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/telemetry/coretrace"
	"github.com/gatekeeper-dev/gatekeeper/internal/usage"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// Recorder is where the picker counts what happened to each request: the
// same request metrics the proxy records (proxy.Metrics satisfies it).
type Recorder interface {
	Outcome(o decide.Outcome, d time.Duration)
	ClassOutcome(class string, o decide.Outcome)
	Rejected(r decide.Reason)
	Sent(upstream string, tokens int64)
	Response(upstream string, status int)
	Usage(upstream string, u usage.Tokens)
}

// CoreOptions configures the Decider over gatekeeper's decision core.
type CoreOptions struct {
	Core     *decide.Core
	Recorder Recorder // nil records nothing
	// PodState, if set, gives the admitted pod's pressure level and window
	// to the admission span.
	PodState coretrace.PodState
	Logger   *slog.Logger
	Now      func() time.Time
	// Fallbacks is how many other pods a pick names after the one holding
	// its slot, best first (endpoint_picker.fallbacks): where the gateway
	// may go when it cannot use the first. 0 names none; at most
	// MaxFallbacks.
	Fallbacks int
	// Scores, if set, writes the pods' scores for each request under
	// ScoresKey (endpoint_picker.scores).
	Scores bool
}

// NewCoreDecider is the Decider over gatekeeper's decision core: the same
// allow-list, classification, model routing, classes, buckets, slow
// breaker, queue and error breaker as the proxy, and the same refusals.
func NewCoreDecider(o CoreOptions) Decider {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &coreDecider{o: o}
}

type coreDecider struct{ o CoreOptions }

func (d *coreDecider) MaxBodyBytes() int64 { return d.o.Core.Policy().MaxBodyBytes }

// Ready is the core's readiness (decide.Core.Unready): its drain, its
// pods and its extra condition (cluster mode) included.
func (d *coreDecider) Ready() bool { return d.o.Core.Unready() == "" }

// Decide runs the core's pipeline (decide.Core.Decide) on what Envoy sent.
// The endpoint whose slot the core took comes first, then the fallbacks
// and scores the options ask for (endpoints). It writes on the server span
// in ctx, if any, what the proxy writes on its own: the route, the GenAI
// attributes of the request and the pod, the reason and the outcome; the
// admission span goes under it.
func (d *coreDecider) Decide(ctx context.Context, r *Request) (*Pick, *Refusal) {
	span := trace.SpanFromContext(ctx) // the server's; a no-op one when it traces nothing
	path, _, _ := strings.Cut(r.Path, "?")
	in := decide.In{Method: r.Method, Path: path, Header: r.Header, Body: r.Body, TooLarge: r.TooLarge, Subset: r.Subset}
	if span.IsRecording() || span.SpanContext().IsValid() {
		in.Trace = spanTracer{span: span, state: d.o.PodState}
	}
	cp := &corePick{d: d, span: span}
	req := &cp.req
	res := d.o.Core.Decide(ctx, req, in)
	switch {
	case res.Admitted == nil && res.Refusal != nil:
		return nil, d.refuse(span, req, *res.Refusal)
	case res.Admitted == nil && res.Models != nil: // GET /v1/models, answered as the proxy does
		d.outcome(span, req, res.Outcome())
		return nil, &Refusal{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: res.Models}
	case res.Admitted == nil: // the client left while queued
		d.outcome(span, req, res.Outcome())
		return nil, nil
	}
	adm := res.Admitted
	if d.o.Recorder != nil {
		d.o.Recorder.Sent(adm.Pod.Name, req.Tokens)
	}
	if span.IsRecording() {
		span.SetAttributes(coretrace.UpstreamKey.String(adm.Pod.Name))
	}
	cp.adm = adm
	cp.Endpoints, cp.Scores = d.endpoints(cp.primary[:0], req, adm, adm.Pod.Endpoint())
	cp.Done = cp.done
	return &cp.Pick, nil
}

// corePick is a pick and what its Done needs, in one allocation: the
// request the core decided on, its admission, and the server span.
type corePick struct {
	Pick
	d       *coreDecider
	span    trace.Span
	req     decide.Request
	adm     *decide.Admitted
	primary [1]string // Endpoints' array when the pick names no fallback
}

func (p *corePick) done(e End) { p.d.finish(p.span, &p.req, p.adm, p.Endpoints, e) }

// spanTracer puts the core's steps on the request's server span and makes
// the admission span under it when the request is traced (the server span
// has a valid context): on the span's own provider, so the picker's
// tracing is set in one place.
type spanTracer struct {
	span  trace.Span
	state coretrace.PodState
}

func (t spanTracer) Routed(ctx context.Context, route decide.Route, ok bool) context.Context {
	if ok && t.span.IsRecording() {
		t.span.SetAttributes(semconv.HTTPRoute(route.Path))
	}
	return ctx
}

func (t spanTracer) Admitting(ctx context.Context, req *decide.Request) context.Context {
	if t.span.IsRecording() {
		t.span.SetAttributes(coretrace.GenAIRequest(nil, req)...)
	}
	if !t.span.SpanContext().IsValid() {
		return ctx
	}
	ctx, _ = coretrace.StartAdmission(ctx, t.span.TracerProvider().Tracer(tracerName))
	return ctx
}

func (t spanTracer) Admitted(ctx context.Context, req *decide.Request, adm *decide.Admitted, rf *decide.Refusal) {
	if !t.span.SpanContext().IsValid() {
		return
	}
	coretrace.EndAdmission(trace.SpanFromContext(ctx), req, adm, rf, t.state)
}

// finish hands the exchange's end to the core (decide.Core.Finish: the
// pod's result, its own refusal, the true-up and the outcome), records
// what it decided, and releases the slot. The picker cannot tell why an
// exchange ended before the response's end (the client left, or Envoy
// could not reach the pod): the pod is not blamed for it. A response a
// fallback served is counted against the pick's slot (servedBy).
func (d *coreDecider) finish(span trace.Span, req *decide.Request, adm *decide.Admitted, endpoints []string, e End) {
	defer adm.Slot.Release()
	rec := d.o.Recorder
	if e.UsageKnown && span.IsRecording() {
		coretrace.Usage(span, e.PromptTokens, e.CompletionTokens)
	}
	adm = d.servedBy(adm, endpoints, e.Served)
	if rec != nil && e.Status != 0 {
		rec.Response(adm.Pod.Name, e.Status)
	}
	de := decide.End{Status: e.Status, StreamError: e.StreamError,
		Usage: decide.Usage{Prompt: e.PromptTokens, Completion: e.CompletionTokens, Known: e.UsageKnown}}
	if !e.Complete {
		de.Cut = decide.CutUnknown
	}
	end := d.o.Core.Finish(req, adm, de)
	switch {
	case rec == nil:
	case end.PodRefused:
		rec.Rejected(decide.ReasonUpstreamOverloaded)
	case end.Outcome == decide.OutcomeServed && e.Status == http.StatusOK:
		rec.Usage(adm.Pod.Name, usage.Tokens{Prompt: e.PromptTokens, Completion: e.CompletionTokens, Known: e.UsageKnown})
	}
	d.outcome(span, req, end.Outcome)
}

func (d *coreDecider) refuse(span trace.Span, req *decide.Request, rf decide.Refusal) *Refusal {
	if rf.Reason != "" {
		if d.o.Recorder != nil {
			d.o.Recorder.Rejected(rf.Reason)
		}
		if span.IsRecording() {
			span.SetAttributes(coretrace.ReasonKey.String(string(rf.Reason)))
		}
	}
	d.outcome(span, req, rf.Reason.Outcome())
	return render(rf)
}

// outcome records the request's one outcome, on span too.
func (d *coreDecider) outcome(span trace.Span, req *decide.Request, o decide.Outcome) {
	if span.IsRecording() {
		span.SetAttributes(coretrace.OutcomeKey.String(string(o)))
	}
	if d.o.Recorder == nil {
		return
	}
	d.o.Recorder.Outcome(o, d.o.Now().Sub(req.Start))
	if req.Class != nil {
		d.o.Recorder.ClassOutcome(req.Class.Name, o)
	}
}
