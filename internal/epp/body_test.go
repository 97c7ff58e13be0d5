package epp

import (
	"bytes"
	"strconv"
	"testing"
)

// pattern is n bytes that differ from chunk to chunk, so that a reordered
// or dropped chunk shows.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + i%23 + i/10007%3)
	}
	return b
}

// TestBodyEcho: a 200,000-byte request body, sent in 16 KiB chunks, comes
// back byte-identical in chunks of at most 62,000 bytes with the length
// set; a 200,000-byte response chunk is split the same way.
func TestBodyEcho(t *testing.T) {
	t.Parallel()
	body := pattern(200000)
	h := newHarness(t, newFakeDecider(), Options{})
	e := h.open()
	e.send(reqHeaders(false, "content-length", "200000"))
	for off := 0; off < len(body); off += 16 << 10 {
		end := min(off+16<<10, len(body))
		e.send(reqBody(string(body[off:end]), end == len(body)))
	}
	e.pick("200000")
	if got := e.body(requestSide, len(body), true); !bytes.Equal(got, body) {
		t.Fatalf("request body echoed: %d bytes, not the %d sent", len(got), len(body))
	}
	if got := h.dec.lastRequest(t).Body; !bytes.Equal(got, body) {
		t.Errorf("Decide saw %d bytes of body, want the %d sent", len(got), len(body))
	}
	e.send(respHeaders(false, ":status", "200", "content-type", "application/octet-stream"), respBody(string(body), true))
	e.recv()
	if got := e.body(responseSide, len(body), true); !bytes.Equal(got, body) {
		t.Fatalf("response body echoed: %d bytes, not the %d sent", len(got), len(body))
	}
	if got := h.dec.end(t); !got.Complete || got.UsageKnown {
		t.Errorf("released with %+v, want complete and no usage", got)
	}
	e.closed()
	h.dec.settled(t)
}

// TestTooLargeAdmitted: a Decider may admit a body past its limit; the
// Decider sees the first MaxBodyBytes bytes with TooLarge, and the whole
// body passes through, the rest as it comes, its Content-Length untouched.
func TestTooLargeAdmitted(t *testing.T) {
	const limit = 1000
	body := pattern(5000)
	tests := []struct {
		name     string
		chunks   []int // chunk sizes, summing to 5000
		trailers bool  // trailers end the body
	}{
		{name: "passes the limit mid-body", chunks: []int{600, 600, 1800, 2000}},
		{name: "passes the limit in its last chunk", chunks: []int{900, 4100}},
		{name: "passes the limit in its first chunk, trailers end it", chunks: []int{3000, 2000}, trailers: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dec := newFakeDecider()
			dec.max = limit
			h := newHarness(t, dec, Options{})
			e := h.open()
			e.send(reqHeaders(false, "x-test", testAdmitLarge, "content-length", strconv.Itoa(len(body))))
			off := 0
			for i, n := range tt.chunks {
				e.send(reqBody(string(body[off:off+n]), !tt.trailers && i == len(tt.chunks)-1))
				off += n
			}
			if tt.trailers {
				e.send(reqTrailers())
			}
			e.pick("")
			if got := e.body(requestSide, len(body), !tt.trailers); !bytes.Equal(got, body) {
				t.Fatalf("request body through: %d bytes, not the %d sent", len(got), len(body))
			}
			if tt.trailers && e.recv().GetRequestTrailers() == nil {
				t.Fatal("want a request trailers answer")
			}
			if r := h.dec.lastRequest(t); !r.TooLarge || !bytes.Equal(r.Body, body[:limit]) {
				t.Errorf("Decide saw TooLarge=%v and %d bytes, want true and the first %d", r.TooLarge, len(r.Body), limit)
			}
			e.send(respHeaders(true, ":status", "200"))
			e.recv()
			if got := h.dec.end(t); !got.Complete {
				t.Errorf("released with %+v, want complete", got)
			}
			e.closed()
			h.dec.settled(t)
		})
	}
}
