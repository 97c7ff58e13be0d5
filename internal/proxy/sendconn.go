package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/proxy/framing"
)

// SendListener wraps the traffic listener so that server.send_timeout is a
// progress timeout on HTTP/1 connections: an answer is cut only when its
// client has taken no byte of it for send_timeout, however slowly it reads
// otherwise (nginx's send_timeout; Go's HTTP/2 server has the same bound,
// HTTP2Config.WriteByteTimeout, and no HTTP/1 equivalent). A deadline set on
// net/http's side of the connection cannot do that: net/http writes through
// buffers of its own, a write that passes its deadline has lost its place
// in the stream, and net/http then cancels the request. So the bound lives
// in the connection, under net/http and under TLS: a write that is taking
// bytes goes on.
//
// Put it under TLS and framing.Guard, and make ConnContext the same
// http.Server's, so that the Handler can find the connection. Without it the
// Handler bounds each write instead (a write must end within send_timeout),
// as it does on HTTP/2, where the client's flow control is per stream.
func SendListener(l net.Listener) net.Listener { return sendListener{l} }

// ConnContext is the traffic server's http.Server.ConnContext: it carries
// framing.Guard's verdict on the connection (framing.ConnContext) and the
// connection a SendListener made, found under TLS and framing.Guard, to the
// Handler. Other connections pass through.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	ctx = framing.ConnContext(ctx, c)
	for c != nil {
		if sc, ok := c.(*sendConn); ok {
			return context.WithValue(ctx, sendConnKey{}, sc)
		}
		u, ok := c.(interface{ NetConn() net.Conn }) // *tls.Conn, framing's
		if !ok {
			break
		}
		c = u.NetConn()
	}
	return ctx
}

type sendConnKey struct{}

// sendConnFor is the connection of an HTTP/1 request served through a
// SendListener; nil otherwise (HTTP/2 shares its connection among streams).
func sendConnFor(r *http.Request) *sendConn {
	if r.ProtoMajor != 1 {
		return nil
	}
	sc, _ := r.Context().Value(sendConnKey{}).(*sendConn)
	return sc
}

type sendListener struct{ net.Listener }

func (l sendListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sendConn{Conn: c}, nil
}

// progressChecks is how many times per send timeout a stalled write looks
// whether its client took bytes: a client that stops is cut between one
// timeout and one and a quarter after its last byte.
const progressChecks = 4

// sendConn is a client connection whose writes must make progress. It is
// safe for concurrent use, as every net.Conn is, and must not be copied.
type sendConn struct {
	net.Conn
	// timeout is the send timeout in nanoseconds, 0 for none. The handler
	// sets it from each HTTP/1 request's policy, and it stays for what
	// net/http writes after the handler (the end of a chunked body).
	timeout atomic.Int64

	mu       sync.Mutex // guards the fields below
	deadline time.Time  // the write deadline set through SetWriteDeadline (net/http, crypto/tls); zero: none
	armed    bool       // the connection's write deadline is a progress deadline, not deadline
	stepEnd  time.Time  // that progress deadline, while armed
}

// setTimeout sets the send timeout of the writes that follow; 0: none.
func (c *sendConn) setTimeout(d time.Duration) { c.timeout.Store(int64(max(d, 0))) }

// Write writes p, and fails only when the client took no byte of it for
// the send timeout, or at a deadline set through SetWriteDeadline. A step
// of the wait ends at most a quarter timeout on, so that bytes taken are
// seen; the deadlines are on the real clock (time.Now: a connection's can
// have no other). The error of a cut wraps os.ErrDeadlineExceeded.
func (c *sendConn) Write(p []byte) (int, error) {
	t := time.Duration(c.timeout.Load())
	if t <= 0 {
		if err := c.disarm(); err != nil {
			return 0, err
		}
		return c.Conn.Write(p)
	}
	n := 0
	now := time.Now()
	took := now // when the client was last seen taking bytes: the wait starts with the write
	for {
		final, err := c.arm(now, took, t)
		if err != nil {
			return n, err
		}
		m, err := c.Conn.Write(p[n:])
		n += m
		if err == nil || final || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		now = time.Now()
		if m > 0 { // taken during the step: counting from its end never cuts a reader early
			took = now
			continue
		}
		if !now.Before(took.Add(t)) {
			return n, err // nothing taken for t
		}
	}
}

// arm sets the deadline of a write's next step: a quarter of t from now,
// never past took + t, nor past the deadline set through SetWriteDeadline
// (final then: the step's end is the write's). A step's end that an earlier
// write armed serves while it is at least half a step away: the step then
// ends sooner, which only makes the write look at its progress sooner, and
// a stream's writes, one per event, do not each move the connection's timer.
func (c *sendConn) arm(now, took time.Time, t time.Duration) (final bool, err error) {
	d := now.Add(t / progressChecks)
	if cut := took.Add(t); d.After(cut) {
		d = cut
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.deadline.IsZero() && !c.deadline.After(d) {
		d, final = c.deadline, true
	}
	if c.armed && !final && !c.stepEnd.After(d) && c.stepEnd.Sub(now) >= t/(2*progressChecks) {
		return false, nil
	}
	c.armed, c.stepEnd = true, d
	return final, c.Conn.SetWriteDeadline(d)
}

// disarm puts back the deadline set through SetWriteDeadline after timed
// writes (a reload may turn the send timeout off between two writes).
func (c *sendConn) disarm() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.armed {
		return nil
	}
	c.armed = false
	return c.Conn.SetWriteDeadline(c.deadline)
}

// SetWriteDeadline sets a deadline that every write also meets, as on any
// connection. A write in progress takes it at its next step.
func (c *sendConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline, c.armed = t, false
	return c.Conn.SetWriteDeadline(t)
}

// SetDeadline sets the read deadline and, as SetWriteDeadline, the write one.
func (c *sendConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// CloseWrite half-closes the connection when the wrapped one can: net/http
// looks for it to send FIN before closing a connection whose request body
// it did not read.
func (c *sendConn) CloseWrite() error { return closeWrite(c.Conn) }

// NetConn is the wrapped connection.
func (c *sendConn) NetConn() net.Conn { return c.Conn }

// closeWrite half-closes c when it can, for a wrapper's CloseWrite.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errNoCloseWrite
}

var errNoCloseWrite = errors.New("proxy: connection cannot half-close")
