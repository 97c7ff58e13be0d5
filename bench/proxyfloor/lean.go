package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// leanServe is h1's server (net/http's parser on the request side, one
// goroutine per connection, pooled buffers) with a forwarder of its own in
// place of ReverseProxy and podconn: the request is written from the parsed
// *http.Request straight to a pooled pod connection, and the pod's answer
// is relayed as bytes (its status line and headers copied as they came,
// less the hop-by-hop ones; the body by its Content-Length, or its chunks
// passed through) with no http.Response or header map built. It answers
// the question what replacing both net/http objects on the answer's path
// could give; like h1 it has no client-gone detection, no timeouts and no
// header bounds, and it does not handle 1xx answers or a pod that closes
// after its answer without saying so. Measured only; it serves bench
// traffic, not clients.
func leanServe(ln net.Listener, pod string, watch bool) error {
	p := &leanPods{addr: pod}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go leanConn(c, p, watch)
	}
}

// leanPods is a last-in-first-out pool of idle connections to one pod.
type leanPods struct {
	addr string
	mu   sync.Mutex
	idle []*leanPod
}

type leanPod struct {
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

func (p *leanPods) get() (*leanPod, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		pc := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return pc, nil
	}
	p.mu.Unlock()
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		return nil, err
	}
	return &leanPod{c: c, br: bufio.NewReaderSize(c, 4096), bw: bufio.NewWriterSize(c, 4096)}, nil
}

func (p *leanPods) put(pc *leanPod) {
	p.mu.Lock()
	p.idle = append(p.idle, pc)
	p.mu.Unlock()
}

// leanConn serves c's requests in turn. With watch, each request gets what
// net/http's server gives each of its own: a read of one byte, on a
// goroutine of its own, while it is served (the client-gone detection a
// real server needs), ended by a read deadline in the past.
func leanConn(c net.Conn, p *leanPods, watch bool) {
	defer c.Close()
	br, bw, release := connBuffers(c)
	defer release()
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		pc, err := p.get()
		if err != nil {
			bw.WriteString("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			_ = bw.Flush()
			return
		}
		var stop func()
		if watch {
			stop = watchClient(c)
		}
		keep, err := leanExchange(req, pc, p.addr, bw)
		if stop != nil {
			stop()
		}
		if err != nil {
			pc.c.Close()
			return
		}
		if keep {
			p.put(pc)
		} else {
			pc.c.Close()
		}
		_, _ = io.Copy(io.Discard, req.Body)
		if err := bw.Flush(); err != nil || req.Close {
			return
		}
	}
}

var hopByHop = map[string]bool{"Connection": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true}

// leanExchange sends req to the pod and relays its answer to bw; keep
// reports whether the pod connection may serve another request.
func leanExchange(req *http.Request, pc *leanPod, host string, bw *bufio.Writer) (keep bool, err error) {
	if err := leanWriteRequest(req, pc, host); err != nil {
		return false, err
	}
	r := pc.br
	line, err := r.ReadSlice('\n')
	if err != nil {
		return false, err
	}
	bw.Write(line)
	return leanRelayRest(r, bw)
}

func leanWriteRequest(req *http.Request, pc *leanPod, host string) error {
	w := pc.bw
	w.WriteString(req.Method)
	w.WriteByte(' ')
	w.WriteString(req.URL.RequestURI())
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\n")
	for k, vs := range req.Header {
		if hopByHop[k] {
			continue
		}
		for _, v := range vs {
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(v)
			w.WriteString("\r\n")
		}
	}
	if req.ContentLength > 0 {
		w.WriteString("Content-Length: ")
		w.WriteString(strconv.FormatInt(req.ContentLength, 10))
		w.WriteString("\r\n\r\n")
		if _, err := io.CopyN(w, req.Body, req.ContentLength); err != nil {
			return err
		}
	} else {
		w.WriteString("\r\n")
	}
	return w.Flush()
}

func leanRelayRest(r *bufio.Reader, bw *bufio.Writer) (keep bool, err error) {
	h, err := readLeanHead(r, func(name, _ string, line []byte) {
		if name == "Transfer-Encoding" || !hopByHop[name] {
			bw.Write(line)
		}
	})
	if err != nil {
		return false, err
	}
	length, chunked, keep := h.length, h.chunked, h.keep
	switch {
	case chunked:
		bw.WriteString("\r\n")
		return keep, relayChunks(r, bw)
	case length >= 0:
		bw.WriteString("\r\n")
		_, err := io.CopyN(bw, r, length)
		return keep, err
	default:
		return false, errors.New("lean: answer without a length")
	}
}

// relayChunks copies a chunked body as it came, up to its last chunk and
// an empty trailer, flushing after each chunk (an event reaches the client
// when the pod sent it).
func relayChunks(r *bufio.Reader, bw *bufio.Writer) error {
	for {
		line, n, err := nextChunk(r)
		if err != nil {
			return err
		}
		bw.Write(line)
		if n == 0 {
			end, err := r.ReadSlice('\n')
			if err != nil {
				return err
			}
			bw.Write(end)
			return nil
		}
		if _, err := io.CopyN(bw, r, n+2); err != nil {
			return err
		}
		if r.Buffered() == 0 {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
	}
}

// netLeanServe is net/http's server in front of lean's forwarder: the
// answer's headers go into the ResponseWriter's map and its body through
// Write (net/http frames it again), so it measures what replacing only
// ReverseProxy and the pod transport gives while net/http keeps the
// client's side.
func netLeanServer(listen, pod string) *http.Server {
	p := &leanPods{addr: pod}
	return &http.Server{Addr: listen, ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			pc, err := p.get()
			if err != nil {
				http.Error(w, "no pod", http.StatusBadGateway)
				return
			}
			keep, err := netLeanExchange(r, pc, pod, w)
			if err != nil || !keep {
				pc.c.Close()
				return
			}
			p.put(pc)
		})}
}

func netLeanExchange(req *http.Request, pc *leanPod, host string, out http.ResponseWriter) (keep bool, err error) {
	if err := leanWriteRequest(req, pc, host); err != nil {
		return false, err
	}
	r := pc.br
	status, err := readLeanStatus(r)
	if err != nil {
		return false, err
	}
	hdr := out.Header()
	h, err := readLeanHead(r, func(name, value string, _ []byte) {
		if !hopByHop[name] {
			hdr[name] = append(hdr[name], value)
		}
	})
	if err != nil {
		return false, err
	}
	length, chunked, keep := h.length, h.chunked, h.keep
	out.WriteHeader(status)
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	switch {
	case chunked:
		if f, ok := out.(http.Flusher); ok {
			f.Flush() // the headers at once, as ReverseProxy sends a stream's
		}
		return keep, leanDechunk(r, out, *buf)
	case length >= 0:
		_, err := io.CopyBuffer(out, io.LimitReader(r, length), *buf)
		return keep, err
	default:
		return false, errors.New("lean: answer without a length")
	}
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 4096); return &b }}

func leanDechunk(r *bufio.Reader, out http.ResponseWriter, buf []byte) error {
	f, _ := out.(http.Flusher)
	for {
		_, n, err := nextChunk(r)
		if err != nil {
			return err
		}
		if n == 0 {
			_, err := r.ReadSlice('\n')
			return err
		}
		if _, err := io.CopyBuffer(out, io.LimitReader(r, n), buf); err != nil {
			return err
		}
		if _, err := r.Discard(2); err != nil {
			return err
		}
		if r.Buffered() == 0 && f != nil {
			f.Flush()
		}
	}
}

// leanTransport is lean's forwarder as an http.RoundTripper under
// ReverseProxy: the request written as leanWriteRequest writes it, the
// answer's headers parsed into an http.Response by hand, its body read in
// place. It measures what a cheaper pod transport alone gives while
// ReverseProxy and net/http's server stay.
type leanTransport struct{ p *leanPods }

func (t leanTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	pc, err := t.p.get()
	if err != nil {
		return nil, err
	}
	if err := leanWriteRequest(req, pc, t.p.addr); err != nil {
		pc.c.Close()
		return nil, err
	}
	r := pc.br
	status, err := readLeanStatus(r)
	if err != nil {
		pc.c.Close()
		return nil, err
	}
	res := &http.Response{StatusCode: status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: make(http.Header, 4), Request: req}
	h, err := readLeanHead(r, func(name, value string, _ []byte) {
		if name != "Transfer-Encoding" {
			res.Header[name] = append(res.Header[name], value)
		}
	})
	if err != nil {
		pc.c.Close()
		return nil, err
	}
	chunked, keep := h.chunked, h.keep
	res.ContentLength = h.length
	b := &leanBody{p: t.p, pc: pc, keep: keep, left: res.ContentLength}
	if chunked {
		res.TransferEncoding = []string{"chunked"}
		b.chunked, b.left = true, 0
	}
	res.Body = b
	return res, nil
}

type leanBody struct {
	p       *leanPods
	pc      *leanPod
	keep    bool
	chunked bool
	left    int64 // bytes left in the body, or in the current chunk
	done    bool
}

func (b *leanBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	r := b.pc.br
	if b.chunked && b.left == 0 {
		_, n, err := nextChunk(r)
		if err != nil {
			return 0, err
		}
		if n == 0 {
			if _, err := r.ReadSlice('\n'); err != nil {
				return 0, err
			}
			return 0, b.end()
		}
		b.left = n + 2
	}
	if !b.chunked && b.left == 0 {
		return 0, b.end()
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := r.Read(p)
	b.left -= int64(n)
	if b.chunked && b.left < 2 {
		// the chunk's CRLF: not data
		trail := 2 - b.left
		if int64(n) < trail {
			return 0, errors.New("lean: short chunk")
		}
		n -= int(trail)
		if b.left > 0 {
			if _, err := r.Discard(int(b.left)); err != nil {
				return n, err
			}
			b.left = 0
		}
	}
	if err == nil && !b.chunked && b.left == 0 {
		err = b.end()
	}
	return n, err
}

func (b *leanBody) end() error {
	b.done = true
	if b.keep {
		b.p.put(b.pc)
	} else {
		b.pc.c.Close()
	}
	return io.EOF
}

func (b *leanBody) Close() error {
	if !b.done {
		b.done = true
		b.pc.c.Close()
	}
	return nil
}

// watchClient reads one byte of c on a goroutine of its own until stop,
// as net/http's server does while a handler runs (its backgroundRead);
// the byte, if one came, is dropped: the bench pipelines nothing.
func watchClient(c net.Conn) (stop func()) {
	done := make(chan struct{})
	go func() {
		var b [1]byte
		_, _ = c.Read(b[:])
		close(done)
	}()
	return func() {
		_ = c.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = c.SetReadDeadline(time.Time{})
	}
}

// leanHead is what the lean cores need of an answer's header fields.
type leanHead struct {
	length  int64 // the Content-Length; -1 if none
	chunked bool
	keep    bool // the pod did not say Connection: close
}

// readLeanStatus reads the status line and returns its code.
func readLeanStatus(r *bufio.Reader) (int, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	return leanStatus(line)
}

// leanStatus returns the code of a status line ("HTTP/1.1 200 OK\r\n").
func leanStatus(line []byte) (int, error) {
	if len(line) < 12 {
		return 0, errors.New("lean: bad status line")
	}
	return strconv.Atoi(string(line[9:12]))
}

// readLeanHead reads the header lines up to the empty one, handing each to
// field (its canonical name, its value and the line as it came).
func readLeanHead(r *bufio.Reader, field func(name, value string, line []byte)) (leanHead, error) {
	h := leanHead{length: -1, keep: true}
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return h, err
		}
		if len(line) <= 2 {
			return h, nil
		}
		i := bytes.IndexByte(line, ':')
		if i < 0 {
			return h, errors.New("lean: bad header line")
		}
		name := http.CanonicalHeaderKey(string(line[:i]))
		value := string(bytes.TrimSpace(line[i+1:]))
		switch name {
		case "Content-Length":
			if h.length, err = strconv.ParseInt(value, 10, 64); err != nil {
				return h, err
			}
		case "Transfer-Encoding":
			h.chunked = value == "chunked"
		case "Connection":
			h.keep = value != "close"
		}
		field(name, value, line)
	}
}

// nextChunk reads a chunk's header line and the size it gives
// (extensions dropped).
func nextChunk(r *bufio.Reader) (line []byte, n int64, err error) {
	if line, err = r.ReadSlice('\n'); err != nil {
		return nil, 0, err
	}
	size, _, _ := bytes.Cut(line, []byte(";"))
	n, err = strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
	return line, n, err
}
