package epp

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/classify"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
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
	// OnPodRefused hears that a pod answered 503 or 429 itself (its own
	// queue is full), so its window is cut as the proxy's are.
	OnPodRefused func(pod string)
	// Ready, if set, is one more readiness condition (cluster mode: a share
	// of some pod's window is held).
	Ready func() error
	// Draining, if set, says shutdown has begun: new requests are refused.
	Draining func() bool
	// PodState, if set, gives the admitted pod's pressure level and window
	// to the admission span.
	PodState coretrace.PodState
	Logger   *slog.Logger
	Now      func() time.Time
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

func (d *coreDecider) Ready() bool {
	if d.o.Draining != nil && d.o.Draining() {
		return false
	}
	if d.o.Ready != nil && d.o.Ready() != nil {
		return false
	}
	return d.o.Core.Unready() == ""
}

// Decide runs the core's pipeline on what Envoy sent. Only the endpoint
// whose slot the core took is named: a fallback would reach a pod past its
// window. It writes on the server span in ctx, if any, what the proxy
// writes on its own: the route, the GenAI attributes of the request and
// the pod, the reason and the outcome; the admission span goes under it.
func (d *coreDecider) Decide(ctx context.Context, r *Request) (*Pick, *Refusal) {
	core := d.o.Core
	req := core.Begin()
	span := trace.SpanFromContext(ctx) // the server's; a no-op one when it traces nothing
	pol := req.Policy
	if d.o.Draining != nil && d.o.Draining() {
		return nil, d.refuse(span, &req, decide.Refuse(decide.ReasonDraining, "gatekeeper is shutting down; retry on another replica", 0, pol.RetryAfter))
	}
	path, _, _ := strings.Cut(r.Path, "?")
	route, rf := decide.LookupRoute(r.Method, path)
	if rf != nil {
		return nil, d.refuse(span, &req, *rf)
	}
	req.Kind = route.Kind
	if span.IsRecording() {
		span.SetAttributes(semconv.HTTPRoute(route.Path))
	}
	if route.Kind == classify.KindModels && core.Registry().KnowsModels() {
		return nil, d.models(span, &req)
	}
	if r.TooLarge {
		return nil, d.refuse(span, &req, decide.BodyTooLarge(pol.MaxBodyBytes))
	}
	if route.Body {
		if rf := core.Classify(&req, r.Body); rf != nil {
			return nil, d.refuse(span, &req, *rf)
		}
	}
	if rf := core.Route(&req); rf != nil {
		return nil, d.refuse(span, &req, *rf)
	}
	if r.Subset != nil {
		if rf := d.restrict(&req, r.Subset); rf != nil {
			return nil, d.refuse(span, &req, *rf)
		}
	}
	if span.IsRecording() {
		span.SetAttributes(coretrace.GenAIRequest(nil, &req)...)
	}
	adm, rf := d.admit(ctx, span, &req, r.Header, route.Path)
	switch {
	case rf != nil:
		return nil, d.refuse(span, &req, *rf)
	case adm == nil: // the client left while queued
		d.outcome(span, &req, decide.OutcomeClientClosed)
		return nil, nil
	}
	if d.o.Recorder != nil {
		d.o.Recorder.Sent(adm.Pod.Name, req.Tokens)
	}
	if span.IsRecording() {
		span.SetAttributes(coretrace.UpstreamKey.String(adm.Pod.Name))
	}
	endpoint := adm.Pod.Endpoint()
	return &Pick{Endpoints: []string{endpoint}, Done: func(e End) { d.finish(span, &req, adm, endpoint, e) }}, nil
}

// admit takes a slot through the core, inside the admission span when the
// request is traced (span, the server's, has a valid context): the span is
// made on span's own provider, so the picker's tracing is set in one place.
func (d *coreDecider) admit(ctx context.Context, span trace.Span, req *decide.Request, h http.Header, route string) (*decide.Admitted, *decide.Refusal) {
	if !span.SpanContext().IsValid() {
		return d.o.Core.Admit(ctx, req, h, route)
	}
	ctx, as := coretrace.StartAdmission(ctx, span.TracerProvider().Tracer(tracerName))
	adm, rf := d.o.Core.Admit(ctx, req, h, route)
	coretrace.EndAdmission(as, req, adm, rf, d.o.PodState)
	return adm, rf
}

// restrict skips every pod outside Envoy's subset hint; with none of the
// request's pods in it the request is refused at once (503), as the
// Inference Extension's protocol asks.
func (d *coreDecider) restrict(req *decide.Request, subset []string) *decide.Refusal {
	reg := d.o.Core.Registry()
	eligible := 0
	for _, m := range reg.List() {
		switch {
		case slices.Contains(req.Skip, m.Name):
		case slices.Contains(subset, m.Endpoint()):
			eligible++
		default:
			req.Skip = append(req.Skip, m.Name)
		}
	}
	if eligible > 0 {
		return nil
	}
	rf := decide.Refuse(decide.ReasonNoUpstream, "no endpoint in the gateway's subset hint can serve the request; retry later",
		0, req.Policy.RetryAfter)
	return &rf
}

// finish releases the slot once the exchange ended and records its outcome:
// a pod's own 503 or 429 is overload (its window is cut), 5xx or a response
// cut short a failure, a client gone neither.
func (d *coreDecider) finish(span trace.Span, req *decide.Request, adm *decide.Admitted, endpoint string, e End) {
	defer adm.Slot.Release()
	rec := d.o.Recorder
	if e.UsageKnown && span.IsRecording() {
		coretrace.Usage(span, e.PromptTokens, e.CompletionTokens)
	}
	if e.Served != "" && e.Served != endpoint {
		d.o.Logger.LogAttrs(context.Background(), slog.LevelWarn, "the gateway served another endpoint than the one picked",
			slog.String("picked", endpoint), slog.String("served", e.Served), slog.String("upstream", adm.Pod.Name))
	}
	if rec != nil && e.Status != 0 {
		rec.Response(adm.Pod.Name, e.Status)
	}
	// The pod's own refusal and a 5xx did no work for the request: what it
	// was charged is given back. Otherwise it is trued up from the usage;
	// without one (no response headers, a response cut short) the pod may
	// have worked for it and the estimate stands.
	used := decide.Usage{Prompt: e.PromptTokens, Completion: e.CompletionTokens, Known: e.UsageKnown}
	if e.Status == http.StatusTooManyRequests || e.Status >= 500 {
		used = decide.Usage{None: true}
	}
	d.o.Core.Settle(req, adm.Slot, used)
	switch {
	case e.Status == http.StatusServiceUnavailable || e.Status == http.StatusTooManyRequests:
		adm.Done(pods.Excluded)
		if d.o.OnPodRefused != nil {
			d.o.OnPodRefused(adm.Pod.Name)
		}
		if rec != nil {
			rec.Rejected(decide.ReasonUpstreamOverloaded)
		}
		d.outcome(span, req, decide.OutcomeUpstreamOverloaded)
	case e.Status >= 500:
		adm.Done(pods.Failure)
		d.outcome(span, req, decide.OutcomeUpstreamError)
	case e.StreamError:
		adm.Done(pods.Failure) // as a 500 would count
		d.outcome(span, req, decide.OutcomeStreamError)
	case e.Complete && e.Status != 0:
		adm.Done(pods.Success)
		if rec != nil && e.Status == http.StatusOK {
			rec.Usage(adm.Pod.Name, usage.Tokens{Prompt: e.PromptTokens, Completion: e.CompletionTokens, Known: e.UsageKnown})
		}
		d.outcome(span, req, decide.OutcomeServed)
	default:
		// No response headers (the client left, or Envoy could not reach
		// the pod: the picker cannot tell which), or a response cut short:
		// the pod is not blamed.
		adm.Done(pods.Excluded)
		d.outcome(span, req, decide.OutcomeClientClosed)
	}
}

// models answers GET /v1/models itself, as the proxy does: the union of
// the pods' models.
func (d *coreDecider) models(span trace.Span, req *decide.Request) *Refusal {
	body := d.o.Core.Registry().ModelList()
	d.outcome(span, req, decide.OutcomeServed)
	return &Refusal{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: body}
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
