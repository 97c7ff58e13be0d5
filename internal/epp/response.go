package epp

import (
	"log/slog"
	"strconv"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// The response half: every message is answered at once and passes on
// unchanged; the body goes through the usage scanner on its way. The end of
// the response (a body or headers end_of_stream, or trailers) releases the
// pick as complete. A response with no pick (Envoy's own reply, or a stream
// that began with it) is answered the same and releases nothing.

func (x *exchange) responseHeaders(m *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) error {
	x.readServed(m)
	var ctype, cenc string
	size := int64(-1)
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch hv.GetKey() { // Envoy sends keys in lower case, as HTTP/2 does
		case ":status":
			x.status, _ = strconv.Atoi(headerValue(hv))
		case "content-type":
			ctype = headerValue(hv)
		case "content-encoding":
			cenc = headerValue(hv)
		case "content-length":
			if n, err := strconv.ParseInt(headerValue(hv), 10, 64); err == nil {
				size = n
			}
		}
	}
	x.usage.Reset(x.status, ctype, cenc, size)
	if err := x.send(responseHeadersResponse()); err != nil {
		return err
	}
	if h.GetEndOfStream() {
		x.release(true)
	}
	return nil
}

func (x *exchange) responseBody(m *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) error {
	x.readServed(m)
	x.usage.Write(b.GetBody())
	if err := sendBody(x.send, responseSide, b.GetBody(), b.GetEndOfStream()); err != nil {
		return err
	}
	if b.GetEndOfStream() {
		x.release(true)
	}
	return nil
}

func (x *exchange) responseTrailers(m *extprocv3.ProcessingRequest) error {
	x.readServed(m)
	if err := x.send(trailersResponse(responseSide)); err != nil {
		return err
	}
	x.release(true)
	return nil
}

// readServed keeps the served endpoint from any response message that
// carries it: Envoy sends its metadata with each.
func (x *exchange) readServed(m *extprocv3.ProcessingRequest) {
	if s := servedEndpoint(m.GetMetadataContext()); s != "" {
		x.served = s
	}
}

// release hands the pick back, once; complete says the response reached its
// end. Later calls do nothing.
func (x *exchange) release(complete bool) {
	p := x.pick
	if p == nil {
		return
	}
	x.pick = nil
	u := x.usage.Result(complete)
	e := End{
		Status: x.status, Served: x.served,
		PromptTokens: u.Prompt, CompletionTokens: u.Completion, UsageKnown: u.Known, StreamError: u.StreamError,
		Complete: complete, Duration: x.s.now().Sub(x.start),
	}
	state := "complete"
	if !complete {
		state = "incomplete"
	}
	x.debug("exchange ended", slog.Int("status", e.Status), slog.Float64("duration_s", e.Duration.Seconds()),
		slog.String("state", state), slog.String("upstream", e.Served))
	done(p, e)
	x.endSpan(e.Status) // after Done: the Decider writes its last on the span there
}

// abandon releases a pick still held as incomplete, and ends a request's
// span: the stream ended, or a new request came, before the response's end.
func (x *exchange) abandon() {
	x.release(false)
	x.endSpan(0)
}

// endSpan ends the request's server span, once, with the status the client
// got (0: none reached it).
func (x *exchange) endSpan(status int) {
	if x.span == nil {
		return
	}
	end(x.span, status)
	x.span = nil
}

// done calls p.Done, which the Decider must set; a nil one is skipped, not
// a panic on the request path.
func done(p *Pick, e End) {
	if p.Done != nil {
		p.Done(e)
	}
}
