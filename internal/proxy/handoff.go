package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// A stream's handoff (issue 38). While a handler runs, net/http's server
// holds for its connection a reader, a writer and a chunking buffer (4 + 4 +
// 2 KiB), the serving goroutine's stack (8 KiB) and a goroutine reading the
// connection in the background: about half of what an open token stream
// cost, for as long as it lasted. So a plain-text HTTP/1.1 token stream
// leaves net/http once its first event has reached the client: the handler
// hijacks the connection and returns, and one goroutine relays the rest of
// the stream in chunks it frames itself, while a one-byte read (clientWatch)
// does what net/http's background read did: it ends the pod's request at
// once if the client leaves. After the stream the connection goes back to
// the server for the client's next request (ReturnConnsTo), as a kept-alive
// connection would. bench/README.md has the measurements ("Handing a stream
// off").

// A handed-off stream's copy buffer holds a read and room for its chunk's
// framing on either side, in 2 KiB in all (streamBufferSize, the stream's
// copy buffer before the handoff): one byte more would put it in the
// allocator's next size class, 2.25 KiB.
const (
	chunkHeadRoom     = 8 // the chunk's size in hex (at most 3 digits here) and CRLF, right-aligned
	handoffBufferSize = streamBufferSize - chunkHeadRoom - 2
)

type handoffBuffer = [chunkHeadRoom + handoffBufferSize + 2]byte

var handoffBuffers = sync.Pool{New: func() any { return new(handoffBuffer) }}

// handoffs tracks the streams handed off, for shutdown; the zero value is
// ready to use. The count is kept under mu, not in a sync.WaitGroup: a
// stream may be handed off while WaitStreams waits (a handler still running
// after Shutdown gave up), and a WaitGroup forbids an Add from zero
// concurrent with its Wait.
type handoffs struct {
	mu sync.Mutex
	n  int // streams running, and connections given back not yet taken
	// idle is closed when n reaches 0; nil while nobody waits.
	idle chan struct{}
	// cut ends each stream still running (closes its client connection and
	// cancels its pod request); a stream removes its own when it ends.
	cut map[*flight]func()
}

func (hs *handoffs) add(f *flight, cut func()) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.cut == nil {
		hs.cut = make(map[*flight]func())
	}
	hs.cut[f] = cut
	hs.n++
}

func (hs *handoffs) setCut(f *flight, cut func()) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.cut[f] = cut
}

func (hs *handoffs) done(f *flight) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	delete(hs.cut, f)
	hs.releaseLocked()
}

// hold counts a connection given back until the server has taken it.
func (hs *handoffs) hold() {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.n++
}

// release ends what hold counted.
func (hs *handoffs) release() {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.releaseLocked()
}

func (hs *handoffs) releaseLocked() {
	hs.n--
	if hs.n == 0 && hs.idle != nil {
		close(hs.idle)
		hs.idle = nil
	}
}

// ended is closed once nothing is counted.
func (hs *handoffs) ended() <-chan struct{} {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.n == 0 {
		return closedChan
	}
	if hs.idle == nil {
		hs.idle = make(chan struct{})
	}
	return hs.idle
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// WaitStreams waits until every stream handed off has ended, or ctx ends:
// then it cuts those left and waits for them to record their outcome.
// http.Server.Shutdown does not wait for them (their connections are
// hijacked), so a graceful shutdown calls both. Once it returns, a
// connection a stream gave back is the server's, as its own are.
func (h *Handler) WaitStreams(ctx context.Context) error {
	select {
	case <-h.handoffs.ended():
		return nil
	case <-ctx.Done():
	}
	h.handoffs.mu.Lock()
	for _, cut := range h.handoffs.cut {
		cut()
	}
	h.handoffs.mu.Unlock()
	<-h.handoffs.ended()
	return ctx.Err()
}

// mayHandOff reports whether r's answer may be handed off if it streams: an
// HTTP/1.1 request (net/http chunks its answers; HTTP/1.0 has no chunks) in
// plain text for a stream whose ResponseWriter can be hijacked. TLS streams
// stay with net/http: a TLS connection keeps crypto/tls's own buffers
// whatever serves it, and stopping the watching read with a deadline would
// land inside TLS's record layer, which this has not been tested against.
func (h *Handler) mayHandOff(w http.ResponseWriter, r *http.Request, ex *exchange) bool {
	if !h.opts.StreamHandoff || !ex.Stream || r.ProtoMajor != 1 || !r.ProtoAtLeast(1, 1) || r.TLS != nil || r.Method == http.MethodHead {
		return false
	}
	for {
		if _, ok := w.(http.Hijacker); ok {
			return true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return false
		}
		w = u.Unwrap()
	}
}

// detach gives f a context of its own for the pod's request, which the
// client's leaving ends until the handoff and the handler's return does
// not (net/http ends the request's context then).
func (f *flight) detach() {
	ctx, cancel := context.WithCancel(context.WithoutCancel(f.Context))
	f.stopFollowing = context.AfterFunc(f.Context, cancel)
	f.client, f.Context, f.cancel = f.Context, ctx, cancel
}

// holdRest makes res's body end after its first read when res is a stream
// to hand off: ReverseProxy relays and flushes that read, then returns, and
// forward hands off the rest (f.rest). The answer says Connection: close
// unless the connection will go back to the server (keepConn).
// Only a body of unknown length is held, which net/http sends chunked (as
// relay goes on), and one with no trailers announced.
func (f *flight) holdRest(res *http.Response) {
	if f.cancel == nil || res.StatusCode != http.StatusOK || res.ContentLength >= 0 || len(res.Trailer) > 0 || !eventStream(res.Header) {
		return
	}
	f.rest = res.Body
	res.Body = firstRead{f}
	if !f.keepConn {
		res.Header.Set("Connection", "close")
	}
}

// eventStream reports whether h's Content-Type is text/event-stream.
func eventStream(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == "text/event-stream"
}

// firstRead is a held stream's body as ReverseProxy reads it: its first
// read that returns bytes or an error, then io.EOF. Close leaves the rest
// open; forward hands it off or closes it.
type firstRead struct{ f *flight }

func (b firstRead) Read(p []byte) (int, error) {
	f := b.f
	if f.readOnce {
		return 0, io.EOF
	}
	for {
		n, err := f.rest.Read(p)
		if n > 0 || err != nil {
			f.readOnce = true
			f.restEnded = err != nil
			return n, err
		}
	}
}

func (firstRead) Close() error { return nil }

// handOff hands ex's stream off once ReverseProxy has relayed its first
// read: it reports false (nothing done) when the stream has no rest, the
// client has left, or the connection cannot be hijacked; forward then ends
// the stream itself.
func (h *Handler) handOff(w http.ResponseWriter, ex *exchange) bool {
	f := ex.flight
	if f.rest == nil || !f.readOnce || f.restEnded || f.out.timedOut || !f.stopFollowing() {
		return false // the client's leaving has cancelled f's context, if it left
	}
	// An answer that says Connection: close (the drain's) keeps its word
	// after the stream, as net/http would.
	if httpguts.HeaderValuesContainsToken(w.Header()["Connection"], "close") {
		f.keepConn = false
	}
	// Counted before the hijack: http.Server.Shutdown waits for the
	// connection until then, so WaitStreams, called after it, sees the stream.
	h.handoffs.add(f, f.cut)
	nc, brw, err := http.NewResponseController(w).Hijack() // flushes what net/http holds
	if err != nil {
		h.handoffs.done(f)
		// Not followed any more: end the pod's request if the client leaves.
		f.stopFollowing = context.AfterFunc(f.client, f.cancel)
		return false
	}
	h.handoffs.setCut(f, func() { f.cut(); _ = nc.Close() })
	f.handedOff = true
	var pending []byte // what the client sent beyond its request: its next one, pipelined
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		pending = bytes.Clone(b)
	}
	// Nothing the stream keeps may reach net/http's connection, whose
	// buffers are what the handoff gives back: its ResponseWriter, and the
	// request's body, which reads through the connection's reader. What is
	// left of the request serves its outcome's record, which reads its
	// context, not its headers.
	ex.w = nil
	f.out = clientWriter{timedOut: f.out.timedOut, first: f.out.first}
	r := *ex.r
	r.Body, r.GetBody, r.Header = nil, nil, nil
	ex.r = &r
	go h.relay(ex, nc, pending)
	return true
}

// ReturnConnsTo makes srv serve a handed-off stream's connection again
// once the stream has ended, so that its client can send its next request
// on it; without it (or with nil) the connection closes after the stream,
// and the stream's answer says so. Call it before srv serves.
func (h *Handler) ReturnConnsTo(srv *http.Server) { h.server.Store(srv) }

// serveAgain gives nc back to the server, with what the client has already
// sent on it (pending) read first. It reports false when no server takes
// it (none set, or it is shutting down): the caller closes nc then.
func (h *Handler) serveAgain(nc net.Conn, pending []byte) bool {
	srv := h.server.Load()
	if srv == nil || h.core.Draining() {
		return false
	}
	// A connection served again before is the same one: its stream's
	// handoff found it under net/http as it was given.
	c, ok := nc.(*servedAgain)
	if !ok {
		c = &servedAgain{Conn: nc}
	}
	c.mu.Lock()
	c.pending = append(pending, c.pending...) // what net/http and the watch read came first
	c.waiting = len(c.pending) == 0
	c.header = 0
	c.mu.Unlock()
	if c.waiting {
		// net/http starts a new connection's header timeout at once, and a
		// kept one's when its next request begins, waiting for it until the
		// idle timeout; the client's next request here is a kept
		// connection's.
		idle := srv.IdleTimeout
		if idle == 0 {
			idle = srv.ReadTimeout // as net/http's
		}
		var until time.Time
		if idle > 0 {
			until = time.Now().Add(idle)
		}
		if c.Conn.SetReadDeadline(until) != nil {
			return false
		}
	}
	l := &oneConnListener{c: c}
	h.handoffs.hold() // until the server has taken c (WaitStreams)
	go func() {
		defer h.handoffs.release()
		_ = srv.Serve(l) // returns once it has taken c (or at once, shutting down)
		if !l.taken.Load() {
			_ = nc.Close()
		}
	}()
	return true
}

// oneConnListener hands http.Server.Serve one connection, then ends Serve;
// the connection goes on being served.
type oneConnListener struct {
	c     net.Conn
	taken atomic.Bool
}

var errServedOnce = errors.New("proxy: connection served again")

func (l *oneConnListener) Accept() (net.Conn, error) {
	if l.taken.CompareAndSwap(false, true) {
		return l.c, nil
	}
	return nil, errServedOnce
}

func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return l.c.LocalAddr() }

// servedAgain is a handed-off connection given back to the server. It
// reads pending first: bytes the client sent that were read already
// (net/http's buffer, the watching read's byte), which framing.Guard has
// seen. Until the client's next request begins (waiting), its reads keep
// the idle timeout serveAgain set, and a read deadline net/http sets
// meanwhile (its header timeout) starts when the first byte comes. NetConn
// lets ConnContext find its guard and the SendListener's connection under
// it.
type servedAgain struct {
	net.Conn
	mu      sync.Mutex
	pending []byte
	waiting bool
	header  time.Duration // the read deadline net/http set while waiting, from then; 0: none
}

func (c *servedAgain) Read(p []byte) (int, error) {
	c.mu.Lock()
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		if c.waiting {
			c.waiting = false
			var t time.Time
			if c.header > 0 {
				t = time.Now().Add(c.header)
			}
			if derr := c.Conn.SetReadDeadline(t); err == nil {
				err = derr
			}
		}
		c.mu.Unlock()
	}
	return n, err
}

// SetReadDeadline keeps the idle timeout while the connection waits for
// the next request, and remembers t for when it begins; a deadline already
// past (net/http's way to stop a read) applies at once.
func (c *servedAgain) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiting && (t.IsZero() || t.After(time.Now())) {
		c.header = 0
		if !t.IsZero() {
			c.header = time.Until(t)
		}
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *servedAgain) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

func (c *servedAgain) NetConn() net.Conn { return c.Conn }

// CloseWrite half-closes the connection when the wrapped one can (net/http
// looks for it, as framing's connection has it).
func (c *servedAgain) CloseWrite() error { return closeWrite(c.Conn) }

// cut ends f's stream at shutdown: the connection is closed under it, as
// http.Server.Close closes one, so it counts as the client's leaving (not
// the pod's failure).
func (f *flight) cut() {
	f.clientGone.Store(true)
	f.cancel()
}

// relay copies the rest of ex's stream to the client's connection nc, one
// write per read, and ends the chunked body; it records the outcome as
// forward and serveTraffic would have, and before the client sees the
// stream end, as there. A stream that breaks leaves the body unended, as
// net/http does, so that the client sees it cut short.
func (h *Handler) relay(ex *exchange, nc net.Conn, pending []byte) {
	f := ex.flight
	recorded, again := false, false
	record := func(completed bool) {
		recorded = true
		_ = f.rest.Close()
		h.complete(ex, completed)
		ex.ended()
	}
	watch := h.watchClient(f, nc)
	defer func() {
		if p := recover(); p != nil { // net/http would have recovered it on its goroutine
			h.log.LogAttrs(context.Background(), slog.LevelError, "panic relaying a stream",
				slog.String("request_id", ex.id), slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
		}
		if !recorded {
			record(false)
		}
		f.cancel()
		if !again {
			watch.closing.Store(true) // the watch's error from here on is the close's
			_ = nc.Close()
		}
		if h.opts.HandedOffClosed != nil { // closed, or served again as a new connection
			h.opts.HandedOffClosed()
		}
		h.handoffs.done(f)
	}()
	var deadline func() error // each write's, where no SendListener bounds the connection
	if t := ex.Policy.SendTimeout; t > 0 && sendConnFor(ex.r) == nil {
		deadline = func() error { return nc.SetWriteDeadline(time.Now().Add(t)) }
	}
	write := func(b []byte) bool {
		if deadline != nil && deadline() != nil {
			f.clientGone.Store(true)
			return false
		}
		if _, err := nc.Write(b); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				f.out.timedOut = true
			} else {
				f.clientGone.Store(true)
			}
			return false
		}
		return true
	}
	// While the pod is silent, which is most of a stream's life, the relay
	// holds no copy buffer: it waits for the pod's next bytes first, where
	// the body can (podconn's), and takes a buffer only to move them.
	wait, _ := f.rest.(interface{ Wait() })
	for {
		if wait != nil {
			wait.Wait()
		}
		buf := handoffBuffers.Get().(*handoffBuffer)
		n, err := f.rest.Read(buf[chunkHeadRoom : chunkHeadRoom+handoffBufferSize])
		wrote := n == 0 || write(frameChunk(buf, n))
		handoffBuffers.Put(buf)
		if !wrote {
			return
		}
		if err == io.EOF {
			record(true)
			// net/http too ends the body after the handler has returned, and
			// then reads the connection's next request.
			if write(lastChunk) && f.keepConn {
				if b, ok := watch.stop(nc); ok {
					again = h.serveAgain(nc, append(pending, b...))
				}
			}
			return
		}
		if err != nil {
			return // the pod's stream broke
		}
	}
}

// lastChunk ends a chunked body that has no trailers.
var lastChunk = []byte("0\r\n\r\n")

// clientWatch is a read of the client's connection while a handed-off
// stream runs, as net/http's background read is for a handler: a client
// that leaves while the pod is silent ends the pod's request at once, not
// at the next write. It stops at the first byte the client sends (net/http's
// stops there too), or when the relay closes the connection or stops it.
type clientWatch struct {
	closing atomic.Bool // the relay ends it: its error is not the client's leaving
	done    chan struct{}
	b       [1]byte
	n       int
	err     error
}

func (h *Handler) watchClient(f *flight, nc net.Conn) *clientWatch {
	w := &clientWatch{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.n, w.err = nc.Read(w.b[:])
		if w.err != nil && !w.closing.Load() {
			f.clientGone.Store(true)
			f.cancel()
		}
	}()
	return w
}

// stop ends the watch (a read deadline in the past, cleared after) and
// returns the byte it read, if any; false when the client has left.
func (w *clientWatch) stop(nc net.Conn) ([]byte, bool) {
	w.closing.Store(true)
	if nc.SetReadDeadline(time.Unix(1, 0)) != nil {
		return nil, false
	}
	<-w.done
	if nc.SetReadDeadline(time.Time{}) != nil {
		return nil, false
	}
	if w.err != nil && !errors.Is(w.err, os.ErrDeadlineExceeded) {
		return nil, false
	}
	return w.b[:w.n], true
}

// frameChunk frames the n bytes read into buf after its head room as one
// chunk of a chunked body, in place, and returns it.
func frameChunk(buf *handoffBuffer, n int) []byte {
	start := chunkHeadRoom - 2
	buf[start], buf[start+1] = '\r', '\n'
	var hex [8]byte
	h := strconv.AppendInt(hex[:0], int64(n), 16)
	start -= len(h)
	copy(buf[start:], h)
	end := chunkHeadRoom + n
	buf[end], buf[end+1] = '\r', '\n'
	return buf[start : end+2]
}
