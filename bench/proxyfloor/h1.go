package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// h1Serve is the least an HTTP/1.1 server of our own could be if it kept
// net/http's parser (issue 38's question: does replacing net/http's server
// on the traffic listener pay?): one goroutine per connection, pooled 4 KiB
// buffers, requests parsed by http.ReadRequest, answers written by h1Writer
// (the handler's Content-Length, or chunked). It has none of what a server
// must add and net/http's pays for: no client-gone detection (a background
// read per request), no header or idle timeouts, no header size bound, no
// 100-continue, no HEAD or 1xx rules. So it is an upper bound for that
// choice, measured only; it serves bench traffic, not clients.
func h1Serve(listen string, h http.Handler) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go h1Conn(c, h)
	}
}

var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}
)

// connBuffers takes a pooled reader and writer for c; release gives them
// back.
func connBuffers(c net.Conn) (br *bufio.Reader, bw *bufio.Writer, release func()) {
	br = readers.Get().(*bufio.Reader)
	br.Reset(c)
	bw = writers.Get().(*bufio.Writer)
	bw.Reset(c)
	return br, bw, func() { br.Reset(nil); readers.Put(br); bw.Reset(nil); writers.Put(bw) }
}

// h1Conn serves c's requests one after another until it closes or asks to.
func h1Conn(c net.Conn, h http.Handler) {
	defer c.Close()
	br, bw, release := connBuffers(c)
	defer release()
	remote := c.RemoteAddr().String()
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		req.RemoteAddr = remote
		ctx, cancel := context.WithCancel(context.Background())
		req = req.WithContext(ctx)
		w := &h1Writer{bw: bw, h: make(http.Header), req: req}
		h.ServeHTTP(w, req)
		w.finish()
		cancel()
		_, _ = io.Copy(io.Discard, req.Body)
		if err := bw.Flush(); err != nil || req.Close {
			return
		}
	}
}

// h1Writer is one answer's http.ResponseWriter and http.Flusher.
type h1Writer struct {
	bw      *bufio.Writer
	h       http.Header
	req     *http.Request
	status  int
	chunked bool
	wrote   bool
}

func (w *h1Writer) Header() http.Header { return w.h }

func (w *h1Writer) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote, w.status = true, code
	bw := w.bw
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(strconv.Itoa(code))
	bw.WriteByte(' ')
	bw.WriteString(http.StatusText(code))
	bw.WriteString("\r\n")
	if w.h.Get("Content-Length") == "" {
		w.chunked = true
		w.h.Set("Transfer-Encoding", "chunked")
	}
	_ = w.h.Write(bw)
	bw.WriteString("\r\n")
}

func (w *h1Writer) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.chunked {
		w.bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
		w.bw.WriteString("\r\n")
		n, err := w.bw.Write(p)
		w.bw.WriteString("\r\n")
		return n, err
	}
	return w.bw.Write(p)
}

func (w *h1Writer) Flush() { _ = w.bw.Flush() }

func (w *h1Writer) finish() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.chunked {
		w.bw.WriteString("0\r\n\r\n")
	}
}
