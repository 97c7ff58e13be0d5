package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
)

// heldBody is a forwarded request's buffered body while the request may
// still go to a pod: until the pod's answer is accepted (exchange.accept),
// a pod that refuses the request sends it once to another, and a transport
// that failed before writing any of it rewinds it (GetBody). Once the
// answer is accepted nothing can send it again, and release drops it: an
// open stream lasts minutes, and its prompt (often 10 to 100 KiB) is
// garbage from the moment the pod has it. Its buffer is not pooled: a
// transport that read it after release would then read another request's
// body, where now it reads nothing.
type heldBody struct {
	held []byte       // what GetBody reads; nil without a body, and once released
	rd   bytes.Reader // held, as the pod's request reads it
	// send is rd as the pod's request carries it (nil: the route has none):
	// io.NopCloser of rd, which net/http knows to be in memory, so it
	// writes the headers and the body together.
	send io.ReadCloser
}

// errBodyReleased is what GetBody returns once the body is released: a
// transport that rewinds the request then fails loudly rather than
// sending it without its body.
var errBodyReleased = errors.New("proxy: the request body was released once the pod's answer was accepted")

// set holds body (not nil) for the pod's request.
func (b *heldBody) set(body []byte) {
	b.held = body
	b.rd.Reset(body)
	b.send = io.NopCloser(&b.rd)
}

// get is the pod's request's GetBody: a fresh reader of the body, while
// it is held. Transports call it inside RoundTrip, on the handler's
// goroutine, as release is.
func (b *heldBody) get() (io.ReadCloser, error) {
	if b.held == nil {
		return nil, errBodyReleased
	}
	return io.NopCloser(bytes.NewReader(b.held)), nil
}

// release drops the body. The reader the transport wrote it from is
// emptied only when the transport said it reads it no more (done): one
// that writes on a goroutine of its own may still be reading it, and then
// keeps it until the exchange ends.
func (b *heldBody) release(done bool) {
	b.held = nil
	if done {
		b.rd.Reset(nil)
	}
}

// bodySender is what the Handler asks of a transport that can tell (as
// podconn.Transport does): whether RoundTrip has read req's body for the
// last time by the time it returns a response.
type bodySender interface {
	SendsBodyFirst(req *http.Request) bool
}

// accept marks the pod's answer to ex's request as the one the client gets
// (ModifyResponse, when no retry can follow): the request will not be sent
// again, and every reference the exchange holds to its body is dropped,
// so that an open stream does not keep it (issue 38). sent is the
// request as it went to the pod.
func (ex *exchange) accept(sent *http.Request) {
	ex.body = nil
	b := &ex.flight.body
	if b.send == nil {
		return // the route has no body
	}
	bs := ex.h.sender
	b.release(bs != nil && bs.SendsBodyFirst(sent))
}
