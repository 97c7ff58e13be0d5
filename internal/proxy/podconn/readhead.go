package podconn

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"

	"golang.org/x/net/http/httpguts"
)

// readHead reads one response's headers as http.ReadResponse does. The
// answers pods give (HTTP/1.x, 2xx to 5xx but 204 and 304, to a request
// other than HEAD or CONNECT, framed by one Content-Length or by chunked
// alone, with plain header lines) are parsed in place from the reader's
// buffer, with one string for all the field values; anything else, and
// any head the buffer cannot hold whole, goes to http.ReadResponse, which
// has not lost a byte: the plain path only peeks until it has the whole
// head. After a failed peek http.ReadResponse meets the same error: the
// connection keeps its first read error (conn.Read), and the header bound
// stays spent.
func readHead(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodHead || req.Method == http.MethodConnect {
		return http.ReadResponse(br, req)
	}
	head, err := peekHead(br)
	if err != nil || head == nil {
		return http.ReadResponse(br, req) // it meets the same error, or reads the long head
	}
	res, length, chunked, ok := parseHead(head, req)
	if !ok {
		return http.ReadResponse(br, req)
	}
	_, _ = br.Discard(len(head))
	switch {
	case chunked:
		res.Body = &chunkedBody{cr: httputil.NewChunkedReader(br), br: br, res: res}
	case length == 0:
		res.Body = http.NoBody
	default:
		res.Body = &lengthBody{r: br, left: length}
	}
	return res, nil
}

// peekHead returns the response's head, up to and including the empty
// line that ends it, without consuming it; nil if the buffer fills first.
func peekHead(br *bufio.Reader) ([]byte, error) {
	for from := 0; ; {
		buf, _ := br.Peek(br.Buffered()) // what is buffered: no error
		if i := bytes.Index(buf[max(from-3, 0):], crlf2); i >= 0 {
			return buf[:max(from-3, 0)+i+4], nil
		}
		if len(buf) == br.Size() {
			return nil, nil
		}
		from = len(buf)
		if _, err := br.Peek(len(buf) + 1); err != nil && br.Buffered() == len(buf) {
			return nil, err
		}
	}
}

var crlf2 = []byte("\r\n\r\n")

// parseHead parses a head peekHead found; ok is false for anything the
// plain path leaves to http.ReadResponse.
func parseHead(head []byte, req *http.Request) (res *http.Response, length int64, chunked, ok bool) {
	line, rest, _ := bytes.Cut(head, crlf)
	if len(line) < 12 || !bytes.HasPrefix(line, http11[:7]) || line[8] != ' ' || line[7] != '0' && line[7] != '1' {
		return nil, 0, false, false
	}
	code := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return nil, 0, false, false
		}
		code = code*10 + int(c-'0')
	}
	// One string holds the status text and every field value.
	text := string(head[9 : len(head)-4])
	if code < 200 || code == http.StatusNoContent || code == http.StatusNotModified ||
		len(line) > 12 && (line[12] != ' ' || !httpguts.ValidHeaderFieldValue(text[4:len(line)-9])) {
		return nil, 0, false, false
	}
	res = &http.Response{Status: text[:len(line)-9], StatusCode: code, Proto: string(http11), ProtoMajor: 1, ProtoMinor: 1,
		Header: make(http.Header, 8), Request: req, ContentLength: -1}
	if line[7] == '0' {
		res.Proto, res.ProtoMinor = "HTTP/1.0", 0
	}
	var lengths, encodings int
	// One array holds the field values (each field's slice capped at its
	// own element, so an append by a later reader copies rather than
	// writes over the next one), sized as the Header's hint: a head with
	// more fields grows it, and the slices already taken keep the old one.
	values := make([]string, 0, 8)
	off := len(line) + 2 // rest's offset in head
	for len(rest) > 2 {
		fl, more, _ := bytes.Cut(rest, crlf)
		at := off
		off += len(fl) + 2
		rest = more
		colon := bytes.IndexByte(fl, ':')
		if colon <= 0 || !plainName(fl[:colon]) {
			return nil, 0, false, false
		}
		vs, ve := colon+1, len(fl)
		for vs < ve && (fl[vs] == ' ' || fl[vs] == '\t') {
			vs++
		}
		for ve > vs && (fl[ve-1] == ' ' || fl[ve-1] == '\t') {
			ve--
		}
		value := text[at+vs-9 : at+ve-9]
		if !httpguts.ValidHeaderFieldValue(value) {
			return nil, 0, false, false
		}
		name := canonicalName(fl[:colon])
		switch name {
		case "Content-Length":
			n, err := strconv.ParseUint(value, 10, 62)
			if err != nil || lengths > 0 {
				return nil, 0, false, false
			}
			lengths, length = 1, int64(n)
		case "Transfer-Encoding":
			if value != "chunked" || encodings > 0 {
				return nil, 0, false, false
			}
			encodings, chunked = 1, true
			continue // net/http moves it to TransferEncoding
		case "Trailer", "Pragma":
			return nil, 0, false, false // announced trailers, Pragma's Cache-Control: net/http's
		}
		if vs, ok := res.Header[name]; ok { // a field sent twice: rare
			res.Header[name] = append(vs, value)
			continue
		}
		values = append(values, value)
		res.Header[name] = values[len(values)-1 : len(values) : len(values)]
	}
	switch {
	case chunked && lengths > 0, !chunked && lengths == 0, chunked && res.ProtoMinor == 0:
		return nil, 0, false, false // both, read to the close, or HTTP/1.0's ignored chunked: net/http's
	case chunked:
		res.TransferEncoding, length = chunkedTE, -1
	default:
		res.ContentLength = length
	}
	conn := res.Header["Connection"]
	res.Close = httpguts.HeaderValuesContainsToken(conn, "close")
	if res.ProtoMinor == 0 {
		res.Close = res.Close || !httpguts.HeaderValuesContainsToken(conn, "keep-alive")
	} else if res.Close {
		delete(res.Header, "Connection") // as net/http's shouldClose does for HTTP/1.1
	}
	return res, length, chunked, true
}

var (
	crlf       = []byte("\r\n")
	http11     = []byte("HTTP/1.1")
	chunkedTE  = []string{"chunked"}
	errTrailer = errors.New("podconn: unexpected EOF reading the trailer")
)

// plainName reports whether b is a header field name (a token).
func plainName(b []byte) bool {
	for _, c := range b {
		if !httpguts.IsTokenRune(rune(c)) {
			return false
		}
	}
	return true
}

// canonicalName is textproto's canonical form of a valid name, without an
// allocation for the names pods send.
func canonicalName(b []byte) string {
	var buf [64]byte
	if len(b) > len(buf) {
		return textproto.CanonicalMIMEHeaderKey(string(b))
	}
	upper := true
	for i, c := range b {
		switch {
		case upper && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		case !upper && 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		buf[i] = c
		upper = c == '-'
	}
	if s, ok := commonNames[string(buf[:len(b)])]; ok {
		return s
	}
	return string(buf[:len(b)])
}

// commonNames are the names vLLM, uvicorn and gatekeeper's own pods send.
var commonNames = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{"Content-Type", "Content-Length", "Transfer-Encoding", "Date", "Server",
		"Connection", "Keep-Alive", "Retry-After", "X-Request-Id", "Cache-Control", "Vary",
		"Content-Encoding", "Location", "Set-Cookie", "Access-Control-Allow-Origin", "Traceparent"} {
		m[s] = s
	}
	return m
}()

// lengthBody is a body framed by its Content-Length: an end of file
// before it is io.ErrUnexpectedEOF, as net/http's.
type lengthBody struct {
	r    *bufio.Reader
	left int64
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	switch {
	case b.left == 0:
		return n, io.EOF
	case err == io.EOF:
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *lengthBody) Close() error { return nil }

// chunkedBody is a chunked body (net/http's own decoder, public in
// httputil) and its trailer, which it merges into the response's Trailer
// at the end as net/http does.
type chunkedBody struct {
	cr  io.Reader
	br  *bufio.Reader
	res *http.Response
	err error // once ended
}

func (b *chunkedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.cr.Read(p)
	if err == io.EOF {
		err = b.readTrailer()
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

// readTrailer reads what follows the last chunk: an empty line, or
// trailer fields no longer than the reader's buffer (net/http's bound).
func (b *chunkedBody) readTrailer() error {
	buf, err := b.br.Peek(2)
	if bytes.Equal(buf, crlf) {
		_, _ = b.br.Discard(2)
		return io.EOF
	}
	if len(buf) < 2 {
		return errTrailer
	}
	if err != nil {
		return err
	}
	if head, err := peekHead(b.br); head == nil || err != nil {
		return errors.New("http: suspiciously long trailer after chunked body")
	}
	hdr, err := textproto.NewReader(b.br).ReadMIMEHeader()
	if err != nil {
		if err == io.EOF {
			return errTrailer
		}
		return err
	}
	if b.res.Trailer == nil {
		b.res.Trailer = make(http.Header, len(hdr))
	}
	for k, vv := range hdr {
		b.res.Trailer[k] = vv
	}
	return io.EOF
}

func (b *chunkedBody) Close() error { return nil }
