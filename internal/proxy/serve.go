package proxy

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gatekeeper-dev/gatekeeper/internal/classify"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/telemetry/coretrace"
	"go.opentelemetry.io/otel/trace"
)

// exchange is one request's bookkeeping from arrival to its outcome: the
// core's decision state (by value: no allocation of its own) plus what the
// HTTP front learns.
type exchange struct {
	decide.Request
	id       string
	upstream string
	recorded bool

	// Set by dispatch for forward and complete, once a pod is chosen. (They
	// live here rather than in a struct of their own that points to the
	// exchange: that would move every exchange to the heap.)
	r       *http.Request     // the client's request
	member  *pods.Member      // the pod the slot is on
	slot    decide.Slot       // released by complete, once
	done    func(pods.Result) // the pod's error breaker callback, called by complete once
	body    []byte            // the buffered request body; nil when the route has none
	flight  *flight           // what the reverse proxy learns; set by forward
	retried bool              // it went to a second pod (at most once)
	span    trace.Span        // the server span; nil without tracing
}

// serveTraffic runs the request pipeline of DESIGN §2 for every path that is
// not a health endpoint.
func (h *Handler) serveTraffic(w http.ResponseWriter, r *http.Request) {
	ex := &exchange{Request: h.core.Begin()}
	pol := ex.Policy
	if sc := sendConnFor(r); sc != nil {
		sc.setTimeout(pol.SendTimeout) // every write of the answer, gatekeeper's own refusals too
	}
	key := http.CanonicalHeaderKey(pol.RequestIDHeader)
	ids := r.Header[key]
	if len(ids) > 0 {
		ex.id = ids[0]
	}
	if !validRequestID(ex.id) {
		ex.id = h.ids.next()
	}
	// One slice for both headers where Header.Set would make one for each,
	// and none when the client sent just the id: capped at 1, nothing can
	// append to the shared slice in place, and nothing writes into it.
	if len(ids) != 1 || ids[0] != ex.id {
		ids = []string{ex.id}
	}
	ids = ids[:1:1]
	r.Header[key] = ids
	w.Header()[key] = ids

	route, rf := decide.LookupRoute(r.Method, r.URL.EscapedPath())
	if h.tracing != nil {
		r, ex.span = h.tracing.startServer(r, route.Path)
		defer ex.span.End()
	}
	if rf != nil {
		if rf.Status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", route.Allow())
		}
		h.refuse(w, r, ex, *rf)
		return
	}
	ex.Kind = route.Kind
	if h.refusing.Load() {
		h.refuse(w, r, ex, decide.Refuse(decide.ReasonDraining, "gatekeeper is shutting down; retry on another replica", 0, pol.RetryAfter))
		return
	}
	if route.Kind == classify.KindModels && h.reg.KnowsModels() {
		h.serveModels(w, r, ex) // the union of the pools, from gatekeeper itself
		return
	}
	body, ok := h.readBody(w, r, ex, route)
	if !ok {
		return
	}
	if rf := h.core.Route(&ex.Request); rf != nil {
		h.refuse(w, r, ex, *rf)
		return
	}
	h.dispatch(w, r, ex, route, body)
}

// serveAmbiguous refuses a request whose connection sent ambiguous framing
// (see framing.Guard); it never reaches a pod.
func (h *Handler) serveAmbiguous(w http.ResponseWriter, r *http.Request) {
	ex := &exchange{Request: h.core.Begin(), id: h.ids.next()}
	pol := ex.Policy
	w.Header().Set(pol.RequestIDHeader, ex.id)
	h.refuse(w, r, ex, badRequest("ambiguous request framing: Content-Length with Transfer-Encoding, "+
		"a folded header line or a malformed chunk", ""))
}

// readBody reads and classifies the body of routes that carry one. It answers
// 413 past max_body_bytes and 400 for malformed bodies, which never reach a pod.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, ex *exchange, route decide.Route) ([]byte, bool) {
	if !route.Body {
		return nil, true
	}
	pol := ex.Policy
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		// A compressed body cannot be classified, and what is not classified
		// is not forwarded.
		h.refuse(w, r, ex, decide.Compressed())
		return nil, false
	}
	if r.ContentLength > pol.MaxBodyBytes {
		h.refuseLarge(w, r, ex)
		return nil, false
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		// ReadFrom wants MinRead bytes free before it can see EOF; growing
		// by them too makes the body one allocation instead of two and a copy.
		buf.Grow(int(r.ContentLength) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, pol.MaxBodyBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		h.refuseLarge(w, r, ex)
		return nil, false
	case err != nil:
		if r.Context().Err() != nil {
			h.finish(r, ex, decide.OutcomeClientClosed, decide.StatusClientClosed)
			return nil, false
		}
		h.refuse(w, r, ex, badRequest("could not read the request body", ""))
		return nil, false
	}
	body := buf.Bytes()
	if rf := h.core.Classify(&ex.Request, body); rf != nil {
		h.refuse(w, r, ex, *rf)
		return nil, false
	}
	return body, true
}

// dispatch takes a slot through the decision core (class, deadline, fast
// and slow breaker, the queue, the pod's error breaker), then forwards the
// request; a pod that refuses it before any byte reached the client hands
// it once to another pod with room.
func (h *Handler) dispatch(w http.ResponseWriter, r *http.Request, ex *exchange, route decide.Route, body []byte) {
	ctx := r.Context()
	var span trace.Span
	if ex.span != nil {
		ctx, span = coretrace.StartAdmission(ctx, h.tracing.tracer)
	}
	adm, rf := h.core.Admit(ctx, &ex.Request, r.Header, route.Path)
	if span != nil {
		coretrace.EndAdmission(span, &ex.Request, adm, rf, h.tracing.state)
	}
	switch {
	case rf != nil:
		h.refuse(w, r, ex, *rf)
		return
	case adm == nil: // the client left while queued: never sent upstream
		h.finish(r, ex, decide.OutcomeClientClosed, decide.StatusClientClosed)
		return
	}
	for adm != nil {
		ex.r, ex.member, ex.slot, ex.done, ex.body = r, adm.Pod, adm.Slot, adm.Done, body
		if adm = h.forward(w, ex); adm != nil {
			// The pod refused it before any byte reached the client, or could
			// not be reached: once more, on the pod whose slot forward took.
			ex.retried = true
		}
	}
}

// refuse writes a refusal and records its outcome.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, ex *exchange, rf decide.Refusal) {
	if rf.Reason != "" {
		h.metrics.Rejected(rf.Reason)
		if ex.span != nil {
			ex.span.SetAttributes(coretrace.ReasonKey.String(string(rf.Reason)))
		}
	}
	writeRefusal(w, rf)
	h.finish(r, ex, rf.Reason.Outcome(), rf.Status)
}

// finish records the request's one outcome.
func (h *Handler) finish(r *http.Request, ex *exchange, o decide.Outcome, status int) {
	if ex.recorded {
		return
	}
	ex.recorded = true
	d := h.now().Sub(ex.Start)
	if ex.span != nil {
		endServer(ex.span, ex, o, status)
	}
	h.metrics.Outcome(o, d)
	if ex.Class != nil {
		h.metrics.ClassOutcome(ex.Class.Name, o)
	}
	if h.log.Enabled(r.Context(), slog.LevelDebug) {
		h.log.LogAttrs(r.Context(), slog.LevelDebug, "request",
			slog.String("request_id", ex.id), slog.String("upstream", ex.upstream),
			slog.String("state", string(o)), slog.Int("status", status), slog.Float64("duration_s", d.Seconds()))
	}
}

// refuseLarge answers 413 and then, on HTTP/1, reads what the client still
// sends of the body (lingering, below) before the connection closes. A
// client that sends its whole body before it reads the answer (Python's
// http.client) would otherwise meet a reset while it writes, and never read
// the 413. HTTP/2 needs none of it: the server ends the stream, not the
// connection, and flow control has already stopped the client.
func (h *Handler) refuseLarge(w http.ResponseWriter, r *http.Request, ex *exchange) {
	w.Header().Set("Connection", "close")
	h.refuse(w, r, ex, tooLarge(ex.Policy.MaxBodyBytes))
	if r.ProtoMajor != 1 {
		return
	}
	rc := http.NewResponseController(w)
	if rc.Flush() != nil { // the client is gone, or cannot take the answer
		return
	}
	h.linger.drain(r.Body, rc)
}

func tooLarge(limit int64) decide.Refusal {
	return decide.BodyTooLarge(limit)
}

func badRequest(msg, param string) decide.Refusal {
	return decide.BadRequest(msg, param)
}
