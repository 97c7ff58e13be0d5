package proxy

import (
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
)

// A stream's handoff (issue 38). While a handler runs, net/http's server
// holds for its connection a reader, a writer and a chunking buffer (4 + 4 +
// 2 KiB), the serving goroutine's stack (8 KiB) and a goroutine reading the
// connection in the background: about half of what an open token stream
// cost, for as long as it lasted. So a plain-text HTTP/1.1 token stream leaves net/http
// once its first event has reached the client: the handler hijacks the
// connection and returns, and one goroutine relays the rest of the stream
// in chunks it frames itself, then closes the connection, which the answer
// announced (Connection: close). Until its first event the stream stays
// with net/http, whose background read ends the pod's request at once if
// the client leaves while the pod queues or prefills it; once events flow,
// a client that leaves is seen when a write to it fails, an event or two
// later. bench/README.md has the measurements ("Handing a stream off").

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
// ready to use.
type handoffs struct {
	wg sync.WaitGroup
	mu sync.Mutex
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
	hs.wg.Add(1)
}

func (hs *handoffs) setCut(f *flight, cut func()) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.cut[f] = cut
}

func (hs *handoffs) done(f *flight) {
	hs.mu.Lock()
	delete(hs.cut, f)
	hs.mu.Unlock()
	hs.wg.Done()
}

// WaitStreams waits until every stream handed off has ended, or ctx ends:
// then it cuts those left and waits for them to record their outcome.
// http.Server.Shutdown does not wait for them (their connections are
// hijacked), so a graceful shutdown calls both.
func (h *Handler) WaitStreams(ctx context.Context) error {
	ended := make(chan struct{})
	go func() { h.handoffs.wg.Wait(); close(ended) }()
	select {
	case <-ended:
		return nil
	case <-ctx.Done():
	}
	h.handoffs.mu.Lock()
	for _, cut := range h.handoffs.cut {
		cut()
	}
	h.handoffs.mu.Unlock()
	<-ended
	return ctx.Err()
}

// mayHandOff reports whether r's answer may be handed off if it streams: an
// HTTP/1.1 request (net/http chunks its answers; HTTP/1.0 has no chunks) in
// plain text (a handed-off connection closes after its stream, and a new
// TLS connection costs its handshake) for a stream whose ResponseWriter can
// be hijacked.
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
// forward hands off the rest (f.rest). The answer says Connection: close.
// Only a body of unknown length is held, which net/http sends chunked (as
// relay goes on), and one with no trailers announced.
func (f *flight) holdRest(res *http.Response) {
	if f.cancel == nil || res.StatusCode != http.StatusOK || res.ContentLength >= 0 || len(res.Trailer) > 0 || !eventStream(res.Header) {
		return
	}
	f.rest = res.Body
	res.Body = firstRead{f}
	res.Header.Set("Connection", "close")
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
	// Counted before the hijack: http.Server.Shutdown waits for the
	// connection until then, so WaitStreams, called after it, sees the stream.
	h.handoffs.add(f, f.cut)
	nc, _, err := http.NewResponseController(w).Hijack() // flushes what net/http holds
	if err != nil {
		h.handoffs.done(f)
		// Not followed any more: end the pod's request if the client leaves.
		f.stopFollowing = context.AfterFunc(f.client, f.cancel)
		return false
	}
	h.handoffs.setCut(f, func() { f.cut(); _ = nc.Close() })
	f.handedOff = true
	// Nothing the stream keeps may reach net/http's connection, whose
	// buffers are what the handoff gives back: its ResponseWriter, and the
	// request's body, which reads through the connection's reader.
	ex.w = nil
	f.out = clientWriter{timedOut: f.out.timedOut, first: f.out.first}
	r := *ex.r
	r.Body, r.GetBody = nil, nil
	ex.r = &r
	go h.relay(ex, nc)
	return true
}

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
func (h *Handler) relay(ex *exchange, nc net.Conn) {
	f := ex.flight
	recorded := false
	record := func(completed bool) {
		recorded = true
		_ = f.rest.Close()
		h.complete(ex, completed)
		ex.ended()
	}
	closing := h.watchClient(f, nc)
	defer func() {
		if p := recover(); p != nil { // net/http would have recovered it on its goroutine
			h.log.LogAttrs(context.Background(), slog.LevelError, "panic relaying a stream",
				slog.String("request_id", ex.id), slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
		}
		if !recorded {
			record(false)
		}
		closing.Store(true) // the watch's error from here on is the close's
		f.cancel()
		_ = nc.Close()
		if h.opts.HandedOffClosed != nil {
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
	buf := handoffBuffers.Get().(*handoffBuffer)
	defer handoffBuffers.Put(buf)
	for {
		n, err := f.rest.Read(buf[chunkHeadRoom : chunkHeadRoom+handoffBufferSize])
		if n > 0 && !write(frameChunk(buf, n)) {
			return
		}
		if err == io.EOF {
			record(true)
			write(lastChunk) // net/http too ends the body after the handler has returned
			return
		}
		if err != nil {
			return // the pod's stream broke
		}
	}
}

// lastChunk ends a chunked body that has no trailers.
var lastChunk = []byte("0\r\n\r\n")

// watchClient reads nc until it fails, as net/http's background read does
// for a handler: a client that leaves while the pod is silent ends the
// pod's request at once, not at the next write. It stops at the first byte
// the client sends (net/http's stops there too) or when the relay closes nc
// (closing, which it returns, set first).
func (h *Handler) watchClient(f *flight, nc net.Conn) *atomic.Bool {
	closing := new(atomic.Bool)
	go func() {
		var b [1]byte
		if _, err := nc.Read(b[:]); err != nil && !closing.Load() {
			f.clientGone.Store(true)
			f.cancel()
		}
	}()
	return closing
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
