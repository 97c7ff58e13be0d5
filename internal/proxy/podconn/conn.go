package podconn

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Buffer sizes. A connection holds its reader while a response is read (an
// open token stream holds it for its whole life); while idle the reader
// goes back to a pool. The writer is pooled and held only while a request
// is written, so it is sized for requests, not for connections.
const (
	// readBufferSize is the reader's, as http.Transport's was here: a
	// response's headers and an SSE event (~200 B) fit, and a larger read
	// into an empty buffer reads the socket directly.
	readBufferSize = 1 << 10
	// writeBufferSize: headers and a body up to 16 KiB (a prompt of a few
	// thousand tokens) leave in one write; a larger request in 16 KiB writes.
	writeBufferSize = 16 << 10
)

var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufferSize) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufferSize) }}
)

// past is a deadline already passed: it fails a blocked read or write at
// once.
var past = time.Unix(1, 0)

// conn is one connection to a pod. One exchange at a time uses it, on the
// goroutine of the exchange's caller (the request's write, the response's
// headers, then its body's reads); cancel and close may come from others.
type conn struct {
	t   *Transport
	nc  net.Conn
	raw syscall.RawConn // for idleAlive; nil: no check
	// peekFn is peek as a func value for raw.Read, made once.
	peekFn func(fd uintptr) bool
	key    string        // the pool's key
	br     *bufio.Reader // reads nc through the conn; nil while idle
	// onCancel is cancel as a func value, made once per connection.
	onCancel func()

	reused bool // an exchange before this one ended cleanly on it

	// cancelled: the exchange's context ended and its deadline is in the
	// past; set by cancel, read by the exchange.
	cancelled atomic.Bool
	// limited: the response's headers are being read, and limit is what
	// they may still read from the connection.
	limited bool
	limit   int64
	// nread and nwritten are this exchange's bytes so far; werr is the
	// last error writing the connection.
	nread, nwritten int64
	werr            error
	// rerr is the error reading nc ended with: every later read returns it,
	// since a Peek (body.Wait) takes bufio's copy of it.
	rerr error

	idleSince time.Time // guarded by the pool's mutex
	alive     bool      // the idle check's verdict (peek)
	peekBuf   [1]byte   // what peek reads into
}

func newConn(t *Transport, nc net.Conn, key string) *conn {
	c := &conn{t: t, nc: nc, key: key}
	c.initIdleCheck()
	c.onCancel = c.cancel
	c.br = newReader(c)
	return c
}

func newReader(c *conn) *bufio.Reader {
	br := readers.Get().(*bufio.Reader)
	br.Reset(c)
	return br
}

// releaseReader gives the reader back to the pool while c is idle. The
// exchange that left c reusable saw its reader empty, and the response
// body that used it has ended and reads it no more.
func (c *conn) releaseReader() {
	c.br.Reset(nil)
	readers.Put(c.br)
	c.br = nil
}

// Read reads the connection for c.br, within the header bound while the
// headers are read.
func (c *conn) Read(p []byte) (int, error) {
	if c.limited {
		if c.limit <= 0 {
			return 0, errHeaderTooLarge
		}
		if int64(len(p)) > c.limit {
			p = p[:c.limit]
		}
	}
	if c.rerr != nil {
		return 0, c.rerr
	}
	n, err := c.nc.Read(p)
	c.nread += int64(n)
	c.limit -= int64(n)
	if err != nil {
		c.rerr = err
	}
	return n, err
}

// Write writes the connection for the request's writer.
func (c *conn) Write(p []byte) (int, error) {
	n, err := c.nc.Write(p)
	c.nwritten += int64(n)
	if err != nil {
		c.werr = err
	}
	return n, err
}

// cancel ends the exchange in progress: a deadline in the past fails its
// blocked read or write at once. context.AfterFunc calls it.
func (c *conn) cancel() {
	c.cancelled.Store(true)
	_ = c.nc.SetDeadline(past)
}

// setReadDeadline sets the read deadline unless cancel came first. (If
// cancel comes after the Load, its deadline follows this one.)
func (c *conn) setReadDeadline(t time.Time) {
	_ = c.nc.SetReadDeadline(t)
	if c.cancelled.Load() {
		_ = c.nc.SetDeadline(past)
	}
}

func (c *conn) close() { _ = c.nc.Close() }

// exchange sends req and reads its response's headers. The body it returns
// ends the exchange; on an error the connection is closed, and st says how
// far it got.
func (c *conn) exchange(req *http.Request) (resp *http.Response, st stage, err error) {
	ctx := req.Context()
	c.cancelled.Store(false)
	c.nread, c.nwritten, c.werr = 0, 0, nil
	stop := context.AfterFunc(ctx, c.onCancel)
	if err := c.write(req); err != nil {
		st = stageFailed
		if c.werr != nil && c.nwritten == 0 {
			st = stageUnsent
		}
		return nil, st, c.fail(ctx, stop, err)
	}
	if resp, err = c.readResponse(req); err != nil {
		st = stageFailed
		if c.nread == 0 && !c.cancelled.Load() && !isTimeout(err) {
			st = stageUnanswered
		}
		return nil, st, c.fail(ctx, stop, err)
	}
	closing := resp.Close || req.Close
	if resp.Body == http.NoBody {
		c.finish(stop, !closing)
		return resp, stageFailed, nil
	}
	resp.Body = &body{rc: resp.Body, c: c, ctx: ctx, stop: stop, closing: closing,
		chunked: len(resp.TransferEncoding) > 0}
	return resp, stageFailed, nil
}

// write writes req and flushes it once.
func (c *conn) write(req *http.Request) error {
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(c)
	err := writeRequest(bw, req)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	writers.Put(bw)
	return err
}

var (
	errHeaderTooLarge = errors.New("podconn: the pod's response headers exceed the bound; aborted")
	errSwitched       = errors.New("podconn: 101 Switching Protocols to a request that asked for no upgrade")
	errBadStatus      = errors.New("podconn: the pod's response has a status below 100")
)

// headerTimeoutError is ResponseHeaderTimeout's error: a net.Error whose
// Timeout is true, as http.Transport's is.
type headerTimeoutError struct{}

func (headerTimeoutError) Error() string   { return "podconn: timeout awaiting response headers" }
func (headerTimeoutError) Timeout() bool   { return true }
func (headerTimeoutError) Temporary() bool { return true }

var _ net.Error = headerTimeoutError{}

// readResponse reads the final response's headers, handing 1xx ones to the
// request's trace.
func (c *conn) readResponse(req *http.Request) (*http.Response, error) {
	d := c.t.ResponseHeaderTimeout
	if d > 0 {
		c.setReadDeadline(time.Now().Add(d))
	}
	c.limited, c.limit = true, c.t.maxHeaderBytes()
	defer func() { c.limited = false }()
	var trace *httptrace.ClientTrace
	for {
		resp, err := readHead(c.br, req)
		switch {
		case err != nil && c.limit <= 0:
			return nil, fmt.Errorf("%w (%d bytes)", errHeaderTooLarge, c.t.maxHeaderBytes())
		case err != nil && d > 0 && !c.cancelled.Load() && isTimeout(err):
			return nil, headerTimeoutError{}
		case err != nil:
			return nil, err
		case resp.StatusCode < 100:
			return nil, errBadStatus
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, errSwitched
		case resp.StatusCode >= 200:
			if d > 0 {
				c.setReadDeadline(time.Time{})
			}
			return resp, nil
		}
		if trace == nil {
			trace = httptrace.ContextClientTrace(req.Context())
		}
		if trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(resp.StatusCode, textproto.MIMEHeader(resp.Header)); err != nil {
				return nil, err
			}
			c.limit = c.t.maxHeaderBytes() // the trace took it: a new bound for what follows
		}
	}
}

// fail ends a failed exchange: the connection is closed, and an error that
// the context's end caused is the context's.
func (c *conn) fail(ctx context.Context, stop func() bool, err error) error {
	stop()
	c.close()
	return c.mapErr(ctx, err)
}

func (c *conn) mapErr(ctx context.Context, err error) error {
	if c.cancelled.Load() {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
	}
	return err
}

// finish ends an exchange whose response was read to its end: the
// connection goes back to the pool if reuse allows it, nothing followed
// the response, and the context had not ended (stop reports that cancel
// never ran, and now never will).
func (c *conn) finish(stop func() bool, reuse bool) {
	if !stop() || !reuse || c.br.Buffered() != 0 {
		c.close()
		return
	}
	c.t.put(c)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
