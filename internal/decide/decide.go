package decide

import (
	"context"
	"errors"
	"slices"

	"github.com/gatekeeper-dev/gatekeeper/internal/classify"
)

// In is what a front hands Decide of one request.
type In struct {
	// Method and Path are the request's method and escaped path, without
	// the query (see LookupRoute).
	Method, Path string
	// Header holds the request's headers.
	Header Headers
	// Body is the whole request body and TooLarge says it passed the
	// policy's MaxBodyBytes (Body then holds what was read before). Both
	// are ignored when Read is set.
	Body     []byte
	TooLarge bool
	// Read, if set, reads the body once Decide knows that the route carries
	// one and that the request is not refused before (the proxy reads it
	// from the client only then).
	Read BodyReader
	// Subset, if not nil, is the gateway's subset hint: the only endpoints
	// (pods.Member.Endpoint) the request may go to. Empty but not nil: none.
	Subset []string
	// Trace, if set, hears the steps a front puts on its spans.
	Trace Tracer
}

// BodyReader reads a request body for Decide.
type BodyReader interface {
	// ReadBody reads the whole body, at most limit bytes. Its error is
	// ErrBodyTooLarge past limit, ErrCompressed for a compressed body,
	// context.Canceled when the client left; any other error is answered
	// 400.
	ReadBody(limit int64) ([]byte, error)
}

// Errors a BodyReader returns for the bodies Decide refuses.
var (
	// ErrBodyTooLarge: the body passed the policy's MaxBodyBytes (413).
	ErrBodyTooLarge = errors.New("decide: request body too large")
	// ErrCompressed: the body is compressed, so it cannot be classified
	// (415).
	ErrCompressed = errors.New("decide: compressed request body")
)

// Tracer hears the steps of Decide that the fronts put on their spans. The
// contexts it returns carry Decide on.
type Tracer interface {
	// Routed is called once the route lookup ran: route is the zero Route
	// for an unknown path, and ok is false when the lookup refused it.
	Routed(ctx context.Context, route Route, ok bool) context.Context
	// Admitting is called before the admission (class, buckets, queue);
	// the context it returns is the admission's.
	Admitting(ctx context.Context, req *Request) context.Context
	// Admitted is called with the admission's result (neither adm nor rf:
	// the client left while queued) and Admitting's context.
	Admitted(ctx context.Context, req *Request, adm *Admitted, rf *Refusal)
}

// Result is Decide's answer, which the front translates: exactly one of
// Admitted, Refusal and Models is set, or none when the client left.
type Result struct {
	// Route is the request's route (the zero Route for an unknown path); a
	// 405 carries the route whose Allow the answer names.
	Route Route
	// Admitted is the request's slot on a pod: the front forwards it, then
	// calls Finish.
	Admitted *Admitted
	// Refusal is the answer gatekeeper gives itself.
	Refusal *Refusal
	// Models is the body of the local answer to GET /v1/models (200,
	// application/json): the union of the pods' models.
	Models []byte
}

// Outcome is the recorded end of a request that was not admitted: its
// refusal's, served for the local models list, client_closed when the
// client left. "" for an admitted request (Finish decides its outcome).
func (r Result) Outcome() Outcome {
	switch {
	case r.Admitted != nil:
		return ""
	case r.Refusal != nil:
		return r.Refusal.Reason.Outcome()
	case r.Models != nil:
		return OutcomeServed
	}
	return OutcomeClientClosed
}

// Status is the status of a request that was not admitted, as the front
// logs it (StatusClientClosed when the client left); 0 for an admitted one.
func (r Result) Status() int {
	switch {
	case r.Admitted != nil:
		return 0
	case r.Refusal != nil:
		return r.Refusal.Status
	case r.Models != nil:
		return 200
	}
	return StatusClientClosed
}

// Decide runs a request from its arrival to its slot, the part both fronts
// share: the route allow-list, the drain, the local GET /v1/models (when
// the registry knows the pods' models), the body's limit and its
// classification, the model's pods, the gateway's subset hint and the
// admission. req is the request's decision state: one the front began
// (Begin) or, with a nil Policy, begun here. ctx ends when the client
// leaves. Decide does no I/O but what in.Read does.
func (c *Core) Decide(ctx context.Context, req *Request, in In) Result {
	if req.Policy == nil {
		*req = c.Begin()
	}
	pol := req.Policy
	route, rf := lookupRoute(in.Method, in.Path)
	if in.Trace != nil {
		ctx = in.Trace.Routed(ctx, route, rf == nil)
	}
	res := Result{Route: route}
	if rf != nil {
		res.Refusal = rf
		return res
	}
	req.Kind = route.kind
	if c.refusing.Load() {
		return refused(res, Refuse(ReasonDraining, admissionMessage(ReasonDraining), 0, pol.RetryAfter))
	}
	if route.kind == classify.KindModels && c.reg.KnowsModels() {
		res.Models = c.reg.ModelList()
		return res
	}
	body, tooLarge := in.Body, in.TooLarge
	if in.Read != nil {
		if !route.body {
			body = nil
		} else if body, rf = readBody(in.Read, pol.MaxBodyBytes); rf != nil || body == nil {
			res.Refusal = rf // nil: the client left
			return res
		}
	}
	if tooLarge && in.Read == nil {
		return refused(res, bodyTooLarge(pol.MaxBodyBytes))
	}
	if route.body {
		if rf := c.classify(req, body); rf != nil {
			return refused(res, *rf)
		}
	}
	if rf := c.Route(req); rf != nil {
		return refused(res, *rf)
	}
	c.poolArrived(req)
	if in.Subset != nil {
		if rf := c.restrict(req, in.Subset); rf != nil {
			c.poolRefused(req, rf)
			return refused(res, *rf)
		}
	}
	c.prefix(req, body)
	actx := ctx
	if in.Trace != nil {
		actx = in.Trace.Admitting(ctx, req)
	}
	res.Admitted, res.Refusal = c.admit(actx, req, in.Header, route.Path)
	c.poolRefused(req, res.Refusal)
	if in.Trace != nil {
		in.Trace.Admitted(actx, req, res.Admitted, res.Refusal)
	}
	return res
}

func refused(res Result, rf Refusal) Result {
	res.Refusal = &rf
	return res
}

// readBody reads a body through r: nil body and refusal when the client
// left. An empty body is not nil.
func readBody(r BodyReader, limit int64) ([]byte, *Refusal) {
	body, err := r.ReadBody(limit)
	switch {
	case err == nil:
		if body == nil {
			body = []byte{}
		}
		return body, nil
	case errors.Is(err, context.Canceled):
		return nil, nil
	}
	return nil, bodyRefusal(err, limit)
}

// bodyRefusal answers a body that could not be read.
func bodyRefusal(err error, limit int64) *Refusal {
	rf := BadRequest("could not read the request body", "")
	switch {
	case errors.Is(err, ErrBodyTooLarge):
		rf = bodyTooLarge(limit)
	case errors.Is(err, ErrCompressed):
		rf = compressed()
	}
	return &rf
}

// restrict skips every pod outside the gateway's subset hint; with none of
// the request's pods in it the request is refused at once (503), as the
// Inference Extension's protocol asks.
func (c *Core) restrict(req *Request, subset []string) *Refusal {
	eligible := 0
	for _, m := range c.reg.List() {
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
	rf := Refuse(ReasonNoUpstream, "no endpoint in the gateway's subset hint can serve the request; retry later",
		0, req.Policy.RetryAfter)
	return &rf
}
