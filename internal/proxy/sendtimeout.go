package proxy

import (
	"errors"
	"net/http"
	"os"
	"time"
)

// clientWriter is the ResponseWriter the reverse proxy writes a pod's answer
// to: the client's, with a send timeout. A client that takes no bytes for
// that long (a slow reader holding a slot: nginx's send_timeout) makes the
// write fail; the reverse proxy then aborts the copy, which closes the pod's
// response and so cancels its request, and the slot is freed, and
// clientWriter notes that the cut was a send timeout. On an HTTP/1
// connection from a SendListener the connection enforces it, as a progress
// timeout, and timeout here is 0. Elsewhere (HTTP/2, a server without
// SendListener) it moves the write deadline to now + timeout before every
// write and flush, so each write must end within it. It lives in flight, so
// it costs no allocation of its own. Its zero value writes straight through.
type clientWriter struct {
	w        http.ResponseWriter
	rc       *http.ResponseController // for a w that is wrapped; made when first needed
	timeout  time.Duration            // 0: none
	timedOut bool                     // a write passed its deadline, or its connection's send timeout
	armed    bool                     // a deadline was set and must be cleared
	now      func() time.Time         // the handler's clock, for first; nil: none
	first    time.Time                // when the first body byte was written
	// flushHeader: the answer streams (flushesAtOnce), so its headers go
	// out as they are written, not from the copy loop (see WriteHeader).
	flushHeader bool
}

func (c *clientWriter) Header() http.Header { return c.w.Header() }

// WriteHeader writes the status; a streamed answer's headers go out with it
// (flushHeader). ReverseProxy would send them at once too, from a timer's
// goroutine or from its copy loop, whichever comes first; from the copy loop
// the headers' formatting (net/http's chunkWriter.writeHeader, one of its
// largest frames, and its sorting of the headers) sits below the loop's
// frames, on the stack a stream keeps: deep enough to double it from 8 to
// 16 KiB (bench/README.md, "The handler's stack and heap per stream").
func (c *clientWriter) WriteHeader(code int) {
	c.arm()
	c.w.WriteHeader(code)
	if c.flushHeader && code >= http.StatusOK {
		c.Flush()
	}
}
func (c *clientWriter) Unwrap() http.ResponseWriter { return c.w }

func (c *clientWriter) Write(p []byte) (int, error) {
	if c.first.IsZero() && len(p) > 0 && c.now != nil {
		c.first = c.now()
	}
	c.arm()
	n, err := c.w.Write(p)
	c.note(err)
	return n, err
}

// Flush flushes what was written, within the timeout too. net/http's own
// writer is asked directly, which allocates nothing.
func (c *clientWriter) Flush() {
	c.arm()
	switch f := c.w.(type) {
	case interface{ FlushError() error }:
		c.note(f.FlushError())
	case http.Flusher:
		f.Flush()
	default: // a wrapper that unwraps to one
		c.note(c.controller().Flush())
	}
}

// arm moves the write deadline ahead by the timeout (the real clock: a
// connection deadline).
func (c *clientWriter) arm() {
	if c.timeout > 0 && c.setDeadline(time.Now().Add(c.timeout)) == nil {
		c.armed = true
	}
}

func (c *clientWriter) setDeadline(t time.Time) error {
	if d, ok := c.w.(interface{ SetWriteDeadline(time.Time) error }); ok {
		return d.SetWriteDeadline(t)
	}
	return c.controller().SetWriteDeadline(t)
}

func (c *clientWriter) controller() *http.ResponseController {
	if c.rc == nil {
		c.rc = http.NewResponseController(c.w)
	}
	return c.rc
}

func (c *clientWriter) note(err error) {
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		c.timedOut = true
	}
}

// disarm clears the deadline, so the connection's next request on it (keep
// alive) does not inherit it.
func (c *clientWriter) disarm() {
	if c.armed {
		_ = c.setDeadline(time.Time{})
		c.armed = false
	}
}
