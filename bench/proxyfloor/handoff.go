package main

import (
	"context"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// handoffServe is the podconn core (net/http's server, ReverseProxy over
// podconn) with one change, measured for issue 38's memory per open
// stream: an HTTP/1.1 token stream (a 200 text/event-stream answer) leaves
// net/http's serving goroutine once its headers are out. The handler hijacks
// the connection and returns, and one goroutine of the core's own relays
// the rest in chunks it frames itself, then closes the connection (the
// answer says Connection: close). While the stream lasts, what net/http
// holds per connection goes back: its reader and writers (4 + 4 + 2 KiB),
// the goroutine of its background read, and the serving goroutine with its
// stack. So it is an upper bound for that choice, measured only: it has none
// of what a real handoff must add (a client that leaves is seen only when a
// write to it fails; the server's shutdown does not wait for handed-off
// streams; the connection count drops them).
func handoffServe(listen string, u *url.URL, tr http.RoundTripper) error {
	srv := &http.Server{Addr: listen, Handler: newHandoff(u, tr), ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}

// relayBufferSize is the handed-off stream's copy buffer, gatekeeper's own
// for streams (internal/proxy: streamBufferSize), with room for a chunk's
// framing around it.
const (
	relayBufferSize = 2 << 10
	chunkHead       = 8 // hex length (at most 3 digits here) and CRLF, right-aligned
)

var relayBuffers = sync.Pool{New: func() any { return new([chunkHead + relayBufferSize + 2]byte) }}

// handoff is one request's hand-off: ModifyResponse fills body when the
// answer is a stream to hand off.
type handoff struct{ body io.ReadCloser }

type handoffKey struct{}

func newHandoff(u *url.URL, tr http.RoundTripper) http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport:  tr,
		BufferPool: &buffers{},
		ModifyResponse: func(res *http.Response) error {
			ho, _ := res.Request.Context().Value(handoffKey{}).(*handoff)
			if ho == nil || res.StatusCode != http.StatusOK || !eventStream(res.Header) || len(res.Trailer) > 0 {
				return nil
			}
			ho.body, res.Body = res.Body, http.NoBody
			res.Header.Set("Connection", "close")
			return nil
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 1 || r.Method == http.MethodHead {
			rp.ServeHTTP(w, r)
			return
		}
		// The exchange with the pod outlives the handler, whose context
		// net/http ends when it returns; the client's leaving still ends it
		// until the handoff.
		ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
		stop := context.AfterFunc(r.Context(), cancel)
		ho := &handoff{}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(ctx, handoffKey{}, ho)))
		if ho.body == nil || !stop() {
			if ho.body != nil {
				ho.body.Close()
			}
			cancel()
			return
		}
		nc, _, err := http.NewResponseController(w).Hijack() // flushes the headers
		if err != nil {
			ho.body.Close()
			cancel()
			return
		}
		go relay(nc, ho.body, cancel)
	})
}

// relay copies body to nc as chunks, one write per read, and ends the
// chunked body; a body that breaks leaves it unended, as net/http does.
func relay(nc net.Conn, body io.ReadCloser, cancel context.CancelFunc) {
	defer cancel()
	defer nc.Close()
	defer body.Close()
	buf := relayBuffers.Get().(*[chunkHead + relayBufferSize + 2]byte)
	defer relayBuffers.Put(buf)
	for {
		n, err := body.Read(buf[chunkHead : chunkHead+relayBufferSize])
		if n > 0 {
			start := chunkHead - 2
			buf[start], buf[start+1] = '\r', '\n'
			hex := strconv.AppendInt(buf[:0:start], int64(n), 16) // at most 3 digits
			start -= len(hex)
			copy(buf[start:], hex)
			end := chunkHead + n
			buf[end], buf[end+1] = '\r', '\n'
			if _, werr := nc.Write(buf[start : end+2]); werr != nil {
				return // the client left
			}
		}
		if err == io.EOF {
			_, _ = io.WriteString(nc, "0\r\n\r\n")
			return
		}
		if err != nil {
			return
		}
	}
}

// eventStream reports whether h's Content-Type is text/event-stream.
func eventStream(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == "text/event-stream"
}
