// Package framing guards gatekeeper's plain-HTTP traffic listener against
// ambiguous HTTP/1 framing (request smuggling, issue 7): Guard wraps the
// listener and scans what the server reads, ConnContext carries each
// connection's verdict into its requests, and Ambiguous reads it in the
// handler, which then refuses the request with 400.
package framing

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync/atomic"
)

// Guard wraps a plain-HTTP traffic listener so that a connection whose raw
// HTTP/1 framing is ambiguous — a header block with both Content-Length and
// Transfer-Encoding, an obsolete line fold, a malformed chunk — is refused
// with 400 rather than re-framed. Go's server accepts the
// first two as RFC 9112 allows (Transfer-Encoding wins, a fold becomes a
// space) before any handler runs, but a request that a proxy reads one way and
// a pod another is the stuff of request smuggling (issue 7). Use it with
// ConnContext on the same http.Server. TLS listeners are not wrapped: the
// bytes are encrypted there, and HTTP/2 has no such framing; nor is a
// connection scanned once it has opened with HTTP/2's preface (h2c with
// prior knowledge), which Go's server then serves as HTTP/2 or closes.
func Guard(l net.Listener) net.Listener { return guardListener{l} }

// ConnContext is http.Server.ConnContext for a Guard listener: it makes the
// connection's verdict visible to the handler (Ambiguous). Other connections
// pass through.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	for c != nil {
		if gc, ok := c.(*guardConn); ok {
			return context.WithValue(ctx, guardKey{}, gc)
		}
		u, ok := c.(interface{ NetConn() net.Conn }) // a connection served again (proxy's handoff)
		if !ok {
			break
		}
		c = u.NetConn()
	}
	return ctx
}

type guardKey struct{}

// Ambiguous reports whether the request's connection has sent ambiguous
// framing, in this request's header block or an earlier one. ctx is the
// request's context; without ConnContext it is always false.
func Ambiguous(ctx context.Context) bool {
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

// guardConn scans what the server reads. net/http never reads a connection
// from two goroutines at once (its background read and the request reads
// hand over under a mutex), so the scanner needs no lock of its own; the
// verdict, read by handlers, is an atomic.
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

// CloseWrite half-closes the connection when the wrapped one can. net/http
// looks for it (an interface check) to send FIN before closing a connection
// whose request body it did not read, so the client reads the response
// rather than a reset.
func (c *guardConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errNoCloseWrite
}

var errNoCloseWrite = errors.New("framing: connection cannot half-close")

// NetConn is the wrapped connection, as crypto/tls's Conn has it: a
// ConnContext of another package finds its own connection under Guard's.
func (c *guardConn) NetConn() net.Conn { return c.Conn }

// scanState is where the scanner is in the HTTP/1 message stream.
type scanState uint8

const (
	stRequestLine scanState = iota // leading CR/LF, then the request line
	stHeader                       // header lines up to the blank line
	stBody                         // the rest of a Content-Length body
	stChunkSize                    // a chunk-size line
	stChunkData                    // the rest of a chunk's data
	stChunkEnd                     // the CRLF after a chunk's data
	stTrailer                      // trailer lines up to the blank line
	stTainted                      // ambiguous: the verdict sticks, scanning stops
	stHTTP2                        // the connection opened with HTTP/2's preface: scanning stops
)

// h2Preface opens a connection that speaks HTTP/2 with prior knowledge (RFC
// 9113 §3.4). Go's server serves such a connection as HTTP/2 when it speaks
// h2c, and otherwise reads "PRI * HTTP/2.0" as one request it closes the
// connection after; either way no HTTP/1 request follows on it. A
// connection that begins with only part of it is read as HTTP/1, by Go's
// server and the scanner alike.
var h2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// framingScanner follows the framing of a stream of HTTP/1 requests the way
// Go's server reads it: after a header block with Content-Length N it skips N
// body bytes, with Transfer-Encoding chunked it walks the chunks, with neither
// the next request follows. So every header block is checked, even when a
// body does not end in a newline. It keeps only a bounded prefix of each line.
// The zero value is ready to use.
type framingScanner struct {
	state scanState
	// preface counts the bytes of h2Preface the connection opened with and
	// the scanner holds back, while they are all it has sent; notH2 is set
	// once it sent anything else.
	preface int
	notH2   bool
	line    lineBuf
	remain  uint64 // body or chunk bytes still to skip; CRLF bytes in stChunkEnd
	hdr     headerFacts
}

// headerFacts is what one header block says about framing.
type headerFacts struct {
	http11 bool   // the request line ends in HTTP/1.1
	cl     uint64 // the Content-Length value, when hasCL
	hasCL  bool
	te     int  // Transfer-Encoding lines
	teOK   bool // the last one read "chunked"
	bad    bool // a line no server should frame by (fold, bad length)
}

// scan consumes b and reports whether the stream is (now) ambiguous.
func (s *framingScanner) scan(b []byte) bool {
	if !s.notH2 {
		var held []byte
		if held, b = s.matchPreface(b); len(held) > 0 {
			s.scanHTTP1(held)
		}
	}
	return s.scanHTTP1(b)
}

// matchPreface consumes what b adds to the HTTP/2 preface at the
// connection's start. When the connection turns out to send something else,
// it returns the preface bytes it held back, to be scanned before the rest.
func (s *framingScanner) matchPreface(b []byte) (held, rest []byte) {
	n := min(len(b), len(h2Preface)-s.preface)
	if bytes.Equal(b[:n], h2Preface[s.preface:s.preface+n]) {
		if s.preface += n; s.preface == len(h2Preface) {
			s.state = stHTTP2
		}
		return nil, b[n:]
	}
	s.notH2 = true
	return h2Preface[:s.preface], b
}

// scanHTTP1 scans b as HTTP/1 requests.
func (s *framingScanner) scanHTTP1(b []byte) bool {
	for len(b) > 0 && s.state != stTainted && s.state != stHTTP2 {
		switch s.state {
		case stBody, stChunkData:
			n := min(uint64(len(b)), s.remain)
			b, s.remain = b[n:], s.remain-n
			if s.remain > 0 {
				break
			}
			if s.state == stChunkData {
				s.state, s.remain = stChunkEnd, 2
			} else {
				s.state = stRequestLine
			}
		case stChunkEnd: // exactly CRLF, as Go's chunked reader wants
			if b[0] != "\r\n"[2-s.remain] {
				s.state = stTainted
				break
			}
			b, s.remain = b[1:], s.remain-1
			if s.remain == 0 {
				s.state = stChunkSize
			}
		case stRequestLine:
			if s.line.n == 0 && (b[0] == '\r' || b[0] == '\n') {
				b = b[1:] // blank lines between requests
				continue
			}
			fallthrough
		default:
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				s.line.add(b)
				return false
			}
			s.line.add(b[:i])
			b = b[i+1:]
			s.endLine()
			s.line = lineBuf{}
		}
	}
	return s.state == stTainted
}

// endLine handles the complete line in s.line.
func (s *framingScanner) endLine() {
	l := &s.line
	switch s.state {
	case stRequestLine:
		s.hdr = headerFacts{http11: l.endsWith(" HTTP/1.1")}
		s.state = stHeader
	case stHeader:
		if !l.blank() {
			s.hdr.header(l)
			return
		}
		s.state, s.remain = s.hdr.framing()
	case stChunkSize:
		n, ok := l.chunkSize()
		switch {
		case !ok:
			s.state = stTainted
		case n == 0:
			s.state = stTrailer
		default:
			s.state, s.remain = stChunkData, n
		}
	case stTrailer:
		switch {
		case l.fold():
			s.state = stTainted
		case l.blank():
			s.state = stRequestLine
		}
	}
}

// header records one header line.
func (h *headerFacts) header(l *lineBuf) {
	if l.fold() {
		h.bad = true
		return
	}
	name, value, ok := bytes.Cut(l.text(), []byte(":"))
	if !ok {
		return // Go's server refuses the request
	}
	name = bytes.TrimRight(name, " \t")
	isCL := bytes.EqualFold(name, []byte("Content-Length"))
	isTE := bytes.EqualFold(name, []byte("Transfer-Encoding"))
	if (isCL || isTE) && l.truncated() {
		h.bad = true // too long to read; no client sends that
		return
	}
	value = bytes.Trim(value, " \t")
	switch {
	case isCL:
		n, ok := parseDecimal(value)
		if !ok || (h.hasCL && n != h.cl) {
			h.bad = true // Go refuses these too
		}
		h.cl, h.hasCL = n, true
	case isTE:
		h.te++
		h.teOK = bytes.EqualFold(value, []byte("chunked"))
	}
}

// framing decides, at the end of a header block, how its body is framed.
func (h *headerFacts) framing() (scanState, uint64) {
	switch {
	case h.bad, h.hasCL && h.te > 0:
		return stTainted, 0
	case h.te > 0:
		// Go ignores Transfer-Encoding on HTTP/1.0 (RFC 9112 §6.1 calls
		// that faulty framing) and refuses anything but one "chunked".
		if !h.http11 || h.te != 1 || !h.teOK {
			return stTainted, 0
		}
		return stChunkSize, 0
	case h.cl > 0:
		return stBody, h.cl
	}
	return stRequestLine, 0
}

// parseDecimal parses a Content-Length value as Go's server does: digits
// only, at most 63 bits.
func parseDecimal(v []byte) (uint64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false // 18 digits are below 1<<63; no body is that long
	}
	var n uint64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

// lineKeep bounds what a lineBuf keeps of a line's start: enough for a
// header name with its Content-Length or Transfer-Encoding value, or a chunk
// size. tailKeep is what it keeps of the end: the request line's version.
const (
	lineKeep = 64
	tailKeep = 16
)

// maxChunkLine is the chunk-size line length Go's chunked reader refuses.
const maxChunkLine = 4096

// lineBuf is one line, up to but not including its LF, kept bounded: its
// first lineKeep bytes, its last tailKeep bytes, its length and its CRs.
type lineBuf struct {
	head   [lineKeep]byte
	tail   [tailKeep]byte
	n      int  // the line's length so far
	cr     int  // CR bytes in it
	lastCR bool // it ends in CR (so far)
}

func (l *lineBuf) add(b []byte) {
	if len(b) == 0 {
		return
	}
	if l.n < lineKeep {
		copy(l.head[l.n:], b)
	}
	if len(b) >= tailKeep {
		copy(l.tail[:], b[len(b)-tailKeep:])
	} else {
		copy(l.tail[:], l.tail[len(b):])
		copy(l.tail[tailKeep-len(b):], b)
	}
	l.n += len(b)
	l.cr += bytes.Count(b, []byte("\r"))
	l.lastCR = b[len(b)-1] == '\r'
}

// truncated reports whether the line is longer than what is kept of it.
func (l *lineBuf) truncated() bool { return l.n > lineKeep }

// text is the kept start of the line, without the CR of a CRLF ending.
func (l *lineBuf) text() []byte {
	t := l.head[:min(l.n, lineKeep)]
	if l.lastCR && !l.truncated() {
		t = t[:len(t)-1]
	}
	return t
}

// blank reports whether the line is empty (LF or CRLF alone).
func (l *lineBuf) blank() bool { return l.n == 0 || (l.n == 1 && l.lastCR) }

// fold reports an obsolete line fold: a header line starting with SP or HTAB.
func (l *lineBuf) fold() bool { return l.n > 0 && (l.head[0] == ' ' || l.head[0] == '\t') }

// endsWith reports whether the line, without a final CR, ends with s
// (at most tailKeep-1 bytes).
func (l *lineBuf) endsWith(s string) bool {
	t := l.tail[tailKeep-min(l.n, tailKeep):]
	if l.lastCR {
		t = t[:len(t)-1]
	}
	return bytes.HasSuffix(t, []byte(s))
}

// chunkSize parses a chunk-size line as Go's chunked reader does: CRLF
// ending and no other CR, trailing OWS and any extension after ';' dropped,
// then 1 to 16 hex digits.
func (l *lineBuf) chunkSize() (uint64, bool) {
	if l.cr != 1 || !l.lastCR || l.n-1 >= maxChunkLine {
		return 0, false
	}
	t := l.text()
	size, _, ext := bytes.Cut(t, []byte(";"))
	switch {
	case !ext && l.truncated():
		return 0, false // the size runs past what is kept: no real client does that
	case !ext:
		size = bytes.TrimRight(size, " \t")
	}
	if len(size) == 0 || len(size) > 16 {
		return 0, false
	}
	var n uint64
	for _, c := range size {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | uint64(d)
	}
	return n, true
}
