package proxy

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
)

// GuardListener wraps the traffic listener so that a request whose raw
// HTTP/1 header block is ambiguous — both Content-Length and
// Transfer-Encoding, or an obsolete line fold — is refused with 400 rather
// than re-framed: Go's server accepts both as RFC 9112 allows, but a request
// a proxy reads one way and a pod another is the stuff of request
// smuggling. Use it with ConnContext on the same http.Server. Over TLS the
// bytes are encrypted here, so TLS listeners are not wrapped (HTTP/2 has no
// such framing).
func GuardListener(l net.Listener) net.Listener { return guardListener{l} }

// ConnContext is http.Server.ConnContext for a GuardListener: it makes the
// connection's verdict visible to the handler.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if gc, ok := c.(*guardConn); ok {
		return context.WithValue(ctx, guardKey{}, gc)
	}
	return ctx
}

type guardKey struct{}

// ambiguousFraming reports whether the request's connection sent an
// ambiguous header block.
func ambiguousFraming(ctx context.Context) bool {
	gc, _ := ctx.Value(guardKey{}).(*guardConn)
	return gc != nil && gc.tainted.Load()
}

type guardListener struct{ net.Listener }

func (g guardListener) Accept() (net.Conn, error) {
	c, err := g.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &guardConn{Conn: c}, nil
}

// guardConn scans what the server reads for header blocks. net/http reads a
// connection from one goroutine at a time, with the hand-offs synchronised,
// so the scanner state needs no lock; the verdict is an atomic.
type guardConn struct {
	net.Conn
	tainted atomic.Bool
	s       framingScanner
}

func (c *guardConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.s.scan(p[:n]) {
		c.tainted.Store(true)
	}
	return n, err
}

// framingScanner finds HTTP/1 header blocks in a byte stream without
// knowing the bodies' framing: a block starts at a line that looks like a
// request line and ends at the first empty line. Body lines are skipped
// (JSON bodies hold no raw line breaks inside strings, and a request line
// inside a body is itself a smuggling attempt).
type framingScanner struct {
	head      []byte // the current line's first bytes
	tail      []byte // and its last bytes
	inHeaders bool
	sawCL     bool
	sawTE     bool
}

const scanKeep = 64

// scan consumes b and reports whether an ambiguous header block ended in it.
func (s *framingScanner) scan(b []byte) (ambiguous bool) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			s.add(b)
			return ambiguous
		}
		s.add(b[:i])
		if s.line() {
			ambiguous = true
		}
		s.head, s.tail = s.head[:0], s.tail[:0]
		b = b[i+1:]
	}
	return ambiguous
}

// add appends part of a line, keeping its head and tail only.
func (s *framingScanner) add(b []byte) {
	if room := scanKeep - len(s.head); room > 0 {
		s.head = append(s.head, b[:min(room, len(b))]...)
	}
	s.tail = append(s.tail, b...)
	if len(s.tail) > scanKeep {
		s.tail = append(s.tail[:0], s.tail[len(s.tail)-scanKeep:]...)
	}
}

// line handles one complete line and reports an ambiguous block's end.
func (s *framingScanner) line() bool {
	head := bytes.TrimSuffix(s.head, []byte("\r"))
	tail := bytes.TrimSuffix(s.tail, []byte("\r"))
	if !s.inHeaders {
		if isRequestLine(head, tail) {
			s.inHeaders, s.sawCL, s.sawTE = true, false, false
		}
		return false
	}
	switch {
	case len(head) == 0: // the blank line ending the block
		s.inHeaders = false
		return s.sawCL && s.sawTE
	case head[0] == ' ' || head[0] == '\t': // obsolete line folding
		return true
	}
	name, _, _ := bytes.Cut(head, []byte(":"))
	name = bytes.TrimSpace(name)
	switch {
	case bytes.EqualFold(name, []byte("Content-Length")):
		s.sawCL = true
	case bytes.EqualFold(name, []byte("Transfer-Encoding")):
		s.sawTE = true
	}
	return false
}

// isRequestLine reports whether a line reads "METHOD SP target SP HTTP/1.x".
func isRequestLine(head, tail []byte) bool {
	sp := bytes.IndexByte(head, ' ')
	if sp < 1 {
		return false
	}
	for _, c := range head[:sp] {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return bytes.HasSuffix(tail, []byte(" HTTP/1.1")) || bytes.HasSuffix(tail, []byte(" HTTP/1.0"))
}
