package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/telemetry/coretrace"
	"go.opentelemetry.io/otel/trace"
)

// exchange is one request's bookkeeping from arrival to its outcome: the
// core's decision state (by value: no allocation of its own) plus what the
// HTTP front learns. It is the core's BodyReader and, when the handler
// traces, its Tracer.
type exchange struct {
	decide.Request
	id       string
	upstream string
	recorded bool

	h *Handler
	w http.ResponseWriter
	r *http.Request // the client's request (with the server span's context once it has one)

	// Set by dispatch for forward and complete, once a pod is chosen. (They
	// live here rather than in a struct of their own that points to the
	// exchange: that would move every exchange to the heap.)
	adm     *decide.Admitted // the slot, released by complete once
	member  *pods.Member     // the pod the slot is on
	body    []byte           // the buffered request body; nil when the route has none, and once accept dropped it
	flight  *flight          // what the reverse proxy learns; set by forward
	retried bool             // it went to a second pod (at most once)
	span    trace.Span       // the server span; nil without tracing
	// overload is the guard that admitted it, told when it ends; nil
	// without one.
	overload Overload
}

// serveTraffic runs the request pipeline of DESIGN §2 for every path that is
// not a health endpoint: the decision core decides (decide), the handler
// writes its answer or forwards the request.
//
// Its frame, and every frame under it that is still live while a response
// streams, stays small: the connection goroutine keeps them for the whole
// stream, and a stack that passes 8 KiB at any moment of the request is
// doubled to 16 KiB and kept at that size for as long as the stream lasts
// (bench/README.md, "The handler's stack and heap per stream"). What the
// decision needs (its input, its result, the refusals' values) lives in
// decide's frame, which has returned before the request is forwarded.
func (h *Handler) serveTraffic(w http.ResponseWriter, r *http.Request) {
	ex := h.begin(w, r)
	if ov := h.opts.Overload; ov != nil {
		if !ov.Admit() {
			h.refuseOverloaded(w, r, ex)
			return
		}
		ex.overload = ov
	}
	defer ex.endUnlessHandedOff()
	if adm := h.decide(w, ex); adm != nil {
		h.dispatch(w, ex, adm)
	}
}

// endUnlessHandedOff ends ex on the handler's goroutine, unless its stream
// was handed off: relay ends it then.
func (ex *exchange) endUnlessHandedOff() {
	if ex.flight == nil || !ex.flight.handedOff {
		ex.ended()
	}
}

// ended tells the overload guard that ex's request has ended, and ends its
// server span.
func (ex *exchange) ended() {
	if ex.overload != nil {
		ex.overload.Done()
	}
	ex.endSpan()
}

// begin makes r's exchange: the core's request, the send timeout on r's
// connection and the request id, on the request and on the answer.
func (h *Handler) begin(w http.ResponseWriter, r *http.Request) *exchange {
	ex := &exchange{Request: h.core.Begin(), h: h, w: w, r: r}
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
	return ex
}

// decide asks the core about ex's request and answers it unless the core
// admitted it: it returns the slot to forward it on, or nil once answered.
func (h *Handler) decide(w http.ResponseWriter, ex *exchange) *decide.Admitted {
	r := ex.r
	in := decide.In{Method: r.Method, Path: r.URL.EscapedPath(), Header: r.Header, Read: ex}
	if h.tracing != nil {
		in.Trace = ex
	}
	res := h.core.Decide(r.Context(), &ex.Request, in)
	r = ex.r // with the server span, when it traces
	switch {
	case res.Admitted != nil:
		return res.Admitted
	case res.Refusal == nil && res.Models != nil:
		h.serveModels(w, r, ex, res.Models) // the union of the pools, from gatekeeper itself
	case res.Refusal == nil: // the client left: never sent upstream
		h.finish(r, ex, res.Outcome(), res.Status())
	case res.Refusal.Status == decide.StatusMethodNotAllowed:
		w.Header().Set("Allow", res.Route.Allow())
		h.refuse(w, r, ex, *res.Refusal)
	case res.Refusal.Status == decide.StatusEntityTooLarge:
		h.refuseLarge(w, r, ex, *res.Refusal)
	default:
		h.refuse(w, r, ex, *res.Refusal)
	}
	return nil
}

// endSpan ends the server span, if one was started.
func (ex *exchange) endSpan() {
	if ex.span != nil {
		ex.span.End()
	}
}

// Routed starts the server span, named by the route (decide.Tracer).
func (ex *exchange) Routed(_ context.Context, route decide.Route, _ bool) context.Context {
	ex.r, ex.span = ex.h.tracing.startServer(ex.r, route.Path)
	return ex.r.Context()
}

// Admitting starts the admission span (decide.Tracer).
func (ex *exchange) Admitting(ctx context.Context, _ *decide.Request) context.Context {
	ctx, _ = coretrace.StartAdmission(ctx, ex.h.tracing.tracer)
	return ctx
}

// Admitted ends the admission span with what the core decided (decide.Tracer).
func (ex *exchange) Admitted(ctx context.Context, req *decide.Request, adm *decide.Admitted, rf *decide.Refusal) {
	coretrace.EndAdmission(trace.SpanFromContext(ctx), req, adm, rf, ex.h.tracing.state)
}

// ReadBody reads the body of a route that carries one, up to limit bytes
// (decide.BodyReader). A compressed body cannot be classified, and what is
// not classified is not forwarded.
func (ex *exchange) ReadBody(limit int64) ([]byte, error) {
	r := ex.r
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return nil, decide.ErrCompressed
	}
	if r.ContentLength > limit {
		return nil, decide.ErrBodyTooLarge
	}
	body, err := readBody(http.MaxBytesReader(ex.w, r.Body, limit), r.ContentLength)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, decide.ErrBodyTooLarge
	case err != nil && r.Context().Err() != nil:
		return nil, context.Canceled
	case err != nil:
		return nil, err
	}
	// Read to its end, the body is closed: net/http would otherwise, as the
	// answer's headers go out, try to read what it thinks may remain (with
	// a pooled 8 KiB buffer, several frames deep on a stack that a stream
	// keeps at whatever size it reached).
	_ = r.Body.Close()
	ex.body = body
	return ex.body, nil
}

// readBody reads a body to its end. A body of known length (n > 0) is read
// into a slice of that size, and one byte more to see its end:
// bytes.Buffer.ReadFrom would want bytes.MinRead (512) bytes free to see
// it, which a request keeps while it waits and streams.
func readBody(rd io.Reader, n int64) ([]byte, error) {
	if n <= 0 {
		var buf bytes.Buffer
		_, err := buf.ReadFrom(rd)
		return buf.Bytes(), err
	}
	b := make([]byte, n+1)
	k, err := io.ReadFull(rd, b)
	switch {
	case err == io.ErrUnexpectedEOF && int64(k) == n: // all of it, and its end
		return b[:n:n], nil
	case err == nil: // more than it declared (net/http's own bodies never send it): the rest too
		buf := bytes.NewBuffer(b)
		_, err = buf.ReadFrom(rd)
		return buf.Bytes(), err
	case err == io.ErrUnexpectedEOF || err == io.EOF: // it ended early
		return nil, io.ErrUnexpectedEOF
	default:
		return nil, err
	}
}

// serveAmbiguous refuses a request whose connection sent ambiguous framing
// (see framing.Guard); it never reaches a pod.
func (h *Handler) serveAmbiguous(w http.ResponseWriter, r *http.Request) {
	h.refuseUnread(w, r, badRequest("ambiguous request framing: Content-Length with Transfer-Encoding, "+
		"a folded header line or a malformed chunk", ""))
}

// serveNoH2C answers a client that opened its connection with HTTP/2's
// preface (prior knowledge) while server.h2c is off: Go's server reads it
// as an HTTP/1 request ("PRI * HTTP/2.0") and closes the connection after
// the answer, which such a client cannot read, but logs and metrics can.
func (h *Handler) serveNoH2C(w http.ResponseWriter, r *http.Request) {
	h.refuseUnread(w, r, decide.HTTPVersionNotSupported(
		"plaintext HTTP/2 (h2c) is off on this listener; speak HTTP/1.1, or set server.h2c: true"))
}

// refuseUnread refuses a request the front turns away for how it came,
// before the decision core reads it.
func (h *Handler) refuseUnread(w http.ResponseWriter, r *http.Request, rf decide.Refusal) {
	ex := &exchange{Request: h.core.Begin(), id: h.ids.next()}
	w.Header().Set(ex.Policy.RequestIDHeader, ex.id)
	h.refuse(w, r, ex, rf)
}

// dispatch forwards an admitted request; a pod that refuses it before any
// byte reached the client hands it once to another pod with room.
func (h *Handler) dispatch(w http.ResponseWriter, ex *exchange, adm *decide.Admitted) {
	for adm != nil {
		ex.adm, ex.member = adm, adm.Pod
		if adm = h.forward(w, ex); adm != nil {
			// The pod refused it before any byte reached the client, or could
			// not be reached: once more, on the pod whose slot forward took.
			ex.retried = true
		}
	}
}

// refuseOverloaded refuses a request the overload guard sheds.
func (h *Handler) refuseOverloaded(w http.ResponseWriter, r *http.Request, ex *exchange) {
	h.refuse(w, r, ex, decide.Refuse(decide.ReasonGatewayOverloaded,
		"gatekeeper is saturated; retry later", 0, ex.Policy.RetryAfter))
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

// refuseLarge answers 413 and then reads what the client still sends of the
// body (lingering, below) before the connection closes (HTTP/1) or the
// stream ends (HTTP/2). A client that sends its whole body before it reads
// the answer would otherwise meet a reset while it writes, and never read
// the 413: on HTTP/1 Python's http.client; on HTTP/2, where net/http resets
// a stream whose handler left its body unread (RST_STREAM NO_ERROR, which
// RFC 9113 allows), curl and Python's httpx (the OpenAI SDK's), which then
// report a protocol error, and the SDK retries the whole body.
func (h *Handler) refuseLarge(w http.ResponseWriter, r *http.Request, ex *exchange, rf decide.Refusal) {
	if r.ProtoMajor == 1 { // on HTTP/2 it would send GOAWAY, ending every other stream's connection
		w.Header().Set("Connection", "close")
	}
	h.refuse(w, r, ex, rf)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil { // the client is gone, or cannot take the answer
		return
	}
	h.linger.drain(r.Body, rc)
}

func badRequest(msg, param string) decide.Refusal {
	return decide.BadRequest(msg, param)
}
