package epp

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/usage"
	"go.opentelemetry.io/otel/trace"
)

// phase is where the request half of an exchange stands.
type phase uint8

const (
	awaitHeaders phase = iota // no request yet
	readingBody               // buffering the body for Decide
	passingBody               // admitted past the body limit: chunks pass on as they come
	forwarded                 // the whole request has gone on (or was refused)
)

// bodyEnd says how the request body stood when Decide was called.
type bodyEnd uint8

const (
	noBody      bodyEnd = iota // the headers ended the request
	endOfStream                // a body chunk ended it
	trailersEnd                // trailers ended it
	openBody                   // more to come: the body passed the limit
)

// exchange is one ext_proc stream's state: the request it carries, the pick
// it holds and what it read of the response. Only the stream's Process
// goroutine uses it.
type exchange struct {
	s      *Server
	stream extprocv3.ExternalProcessor_ProcessServer
	phase  phase
	start  time.Time
	req    *Request // until it has gone on; a new one per request, as Decide may keep it
	limit  int64    // the Decider's MaxBodyBytes, read at the headers
	id     string   // X-Request-Id, for the logs
	pick   *Pick    // held until release
	status int      // the response's :status
	served string   // the endpoint Envoy says served it
	usage  usage.Scanner
	span   trace.Span // the request's server span, until its end; nil without tracing
}

func newExchange(s *Server, stream extprocv3.ExternalProcessor_ProcessServer) *exchange {
	return &exchange{s: s, stream: stream}
}

func (x *exchange) send(m *extprocv3.ProcessingResponse) error { return x.stream.Send(m) }

// handle answers one message; end says the stream is done with (a refusal
// was sent, so Envoy expects nothing more of it).
func (x *exchange) handle(m *extprocv3.ProcessingRequest) (end bool, err error) {
	if pc := m.GetProtocolConfig(); pc != nil && !supportedModes(pc) {
		return x.misconfigured(pc)
	}
	switch r := m.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return x.requestHeaders(m, r.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		x.readSubset(m)
		return x.requestBody(r.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		x.readSubset(m)
		return x.requestTrailers()
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return false, x.responseHeaders(m, r.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return false, x.responseBody(m, r.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return false, x.responseTrailers(m)
	}
	// No part of the exchange: a flow-control update, which Envoy sends only
	// to a server that announced flow control (this one does not), or a
	// part newer than this server. Nothing to answer.
	x.debug("ext_proc message ignored")
	return false, nil
}

// requestHeaders starts a request. Envoy opens a stream per request, so
// one already on the stream is over, complete or not.
func (x *exchange) requestHeaders(m *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) (bool, error) {
	if x.phase != awaitHeaders || x.pick != nil {
		x.debug("ext_proc stream carries a new request")
		x.abandon()
		x.status, x.served = 0, ""
		x.usage.Reset(0, "", "", -1)
	}
	x.start = x.s.now()
	r := requestOf(h.GetHeaders().GetHeaders())
	r.Subset, _ = subsetHint(m.GetMetadataContext())
	x.req, x.id = r, r.Header.Get("X-Request-Id")
	if x.s.tracing != nil {
		x.span = x.s.tracing.start(x.stream.Context(), r)
	}
	if h.GetEndOfStream() {
		return x.admit(noBody, nil)
	}
	x.limit = max(x.s.decider.MaxBodyBytes(), 0)
	if cl := r.Header.Get("Content-Length"); cl != "" { // "" would cost ParseInt's error
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n > 0 && n <= x.limit {
			r.Body = make([]byte, 0, n)
		}
	}
	x.phase = readingBody
	return false, nil
}

// readSubset takes a subset hint sent with a later request message: the
// reference picker reads the metadata of the message that ends the body.
func (x *exchange) readSubset(m *extprocv3.ProcessingRequest) {
	if sub, ok := subsetHint(m.GetMetadataContext()); ok && x.phase == readingBody {
		x.req.Subset = sub
	}
}

// requestBody buffers a chunk, and asks the Decider once the body ends or
// passes the limit.
func (x *exchange) requestBody(b *extprocv3.HttpBody) (bool, error) {
	switch x.phase {
	case passingBody:
		if b.GetEndOfStream() {
			x.phase = forwarded
		}
		return false, sendBody(x.send, requestSide, b.GetBody(), b.GetEndOfStream())
	case awaitHeaders:
		return x.protocolError("request body before its headers")
	case forwarded:
		return x.protocolError("request body after its end")
	}
	chunk, end := b.GetBody(), openBody
	if b.GetEndOfStream() {
		end = endOfStream
	}
	if room := x.limit - int64(len(x.req.Body)); int64(len(chunk)) > room {
		x.req.Body = append(x.req.Body, chunk[:room]...)
		x.req.TooLarge = true
		return x.admit(end, chunk[room:])
	}
	x.req.Body = append(x.req.Body, chunk...)
	if end == openBody {
		return false, nil
	}
	return x.admit(end, nil)
}

// requestTrailers ends the body: Envoy sends trailers instead of an
// end_of_stream on the last chunk.
func (x *exchange) requestTrailers() (bool, error) {
	switch x.phase {
	case readingBody:
		return x.admit(trailersEnd, nil)
	case passingBody:
		x.phase = forwarded
		return false, x.send(trailersResponse(requestSide))
	}
	return x.protocolError("request trailers outside a request")
}

// admit asks the Decider about the request and sends its answer: a refusal,
// or the pick followed by the body (what was buffered, then rest, the part
// of the chunk that passed the limit).
func (x *exchange) admit(end bodyEnd, rest []byte) (bool, error) {
	r := x.req
	x.phase, x.req = forwarded, nil
	pick, rf := x.decide(r)
	if rf != nil {
		err := x.send(immediateResponse(rf))
		status := rf.Status
		if x.stream.Context().Err() != nil {
			status = 0 // the stream is gone: the client got no answer
		}
		x.endSpan(status)
		return true, err
	}
	x.pick = pick
	bodyLen := -1 // a body-less request, or one passing through: its own length stands
	if end != noBody && !r.TooLarge {
		bodyLen = len(r.Body)
	}
	var traceHeaders [][2]string
	if x.span != nil {
		traceHeaders = x.s.tracing.headers(x.span)
	}
	if err := x.send(pickResponse(pick, bodyLen, traceHeaders)); err != nil || end == noBody {
		return false, err
	}
	eos := end == endOfStream
	if err := sendBody(x.send, requestSide, r.Body, eos && !r.TooLarge); err != nil {
		return false, err
	}
	if r.TooLarge {
		if err := sendBody(x.send, requestSide, rest, eos); err != nil {
			return false, err
		}
	}
	switch end {
	case openBody:
		x.phase = passingBody
	case trailersEnd:
		return false, x.send(trailersResponse(requestSide))
	}
	return false, nil
}

// decide calls the Decider, and turns a broken answer into a refusal of
// the server's own, releasing any slot that came with it. The Decider's
// ctx is the stream's, with the request's server span when it is traced.
func (x *exchange) decide(r *Request) (*Pick, *Refusal) {
	ctx := x.stream.Context()
	if x.span != nil {
		ctx = trace.ContextWithSpan(ctx, x.span)
	}
	pick, rf := x.s.decider.Decide(ctx, r)
	switch {
	case rf != nil:
		if pick != nil {
			done(pick, End{Duration: x.s.now().Sub(x.start)})
		}
		x.debug("request refused", slog.Int("status", rf.Status))
		return nil, rf
	case pick == nil:
		return nil, x.own(decide.ReasonInternal, "the decision core gave no answer")
	case len(pick.Endpoints) == 0:
		done(pick, End{Duration: x.s.now().Sub(x.start)})
		return nil, x.own(decide.ReasonNoUpstream, "no endpoint can take the request")
	}
	x.debug("request admitted", slog.String("upstream", pick.Endpoints[0]))
	return pick, nil
}

// protocolError answers a message that breaks the ext_proc exchange with a
// 400 and ends the stream; a pick it held is released as incomplete.
func (x *exchange) protocolError(msg string) (bool, error) {
	x.debug("ext_proc protocol error", slog.String("err", msg))
	x.release(false)
	x.phase = forwarded
	x.endSpan(http.StatusBadRequest) // unless the pick's release ended it
	return true, x.send(immediateResponse(x.own(decide.ReasonBadRequest, "ext_proc: "+msg)))
}

// supportedModes reports whether the server can serve Envoy's body modes,
// which newer Envoys announce in a stream's first message. The request body
// must come FULL_DUPLEX_STREAMED: in any other mode Envoy waits for the
// headers' answer, which waits for the body. The response body may also not
// come at all (NONE), at the cost of its usage.
func supportedModes(pc *extprocv3.ProtocolConfiguration) bool {
	return pc.GetRequestBodyMode() == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED &&
		(pc.GetResponseBodyMode() == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED ||
			pc.GetResponseBodyMode() == extprocfilterv3.ProcessingMode_NONE)
}

// misconfigured refuses a stream whose body modes the server cannot serve
// with a 500, rather than leave Envoy waiting until its message timeout.
// The modes go to the log (state: request/response), not to the client.
func (x *exchange) misconfigured(pc *extprocv3.ProtocolConfiguration) (bool, error) {
	x.s.log.LogAttrs(x.stream.Context(), slog.LevelWarn, "ext_proc body modes unsupported",
		slog.String("state", pc.GetRequestBodyMode().String()+"/"+pc.GetResponseBodyMode().String()))
	x.release(false)
	x.phase = forwarded
	x.endSpan(http.StatusInternalServerError) // unless the pick's release ended it
	return true, x.send(immediateResponse(x.own(decide.ReasonExtProcMode, "the gateway's endpoint picker is misconfigured")))
}

// own is the server's own answer for reason, counted as the core's
// refusals are (Options.Recorder's Rejected).
func (x *exchange) own(reason decide.Reason, message string) *Refusal {
	if x.s.rec != nil {
		x.s.rec.Rejected(reason)
	}
	return ownRefusal(reason, message)
}

// ended returns what Process returns once Recv has failed: nothing when
// Envoy closed its side or gave the stream up (the exchange is over, or the
// client left), else the transport's error.
func (x *exchange) ended(err error) error {
	if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
		return nil
	}
	x.debug("ext_proc stream failed", slog.String("err", err.Error()))
	return err
}

// debug logs a per-request line, with the request's ID.
func (x *exchange) debug(msg string, attrs ...slog.Attr) {
	ctx := x.stream.Context()
	if !x.s.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	x.s.log.LogAttrs(ctx, slog.LevelDebug, msg, append(attrs, slog.String("request_id", x.id))...)
}
