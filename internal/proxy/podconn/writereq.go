package podconn

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// writeRequest writes req as (*http.Request).Write does, without its
// formatting and transfer machinery, for the requests gatekeeper sends: a
// body of known length (or none), no trailers, no Transfer-Encoding of its
// own, an ASCII host. Others go to req.Write. The one difference is the
// order of the header fields: net/http sorts them, this writes them in the
// map's order (field order carries no meaning between fields of different
// names; the values of one field keep theirs). Like req.Write it closes the
// body.
func writeRequest(bw *bufio.Writer, req *http.Request) error {
	n, ok := plainLength(req)
	host, hostOK := plainHost(req)
	if !ok || !hostOK || len(req.TransferEncoding) != 0 || len(req.Trailer) != 0 || req.Method == "CONNECT" {
		return req.Write(bw)
	}
	ruri := req.URL.RequestURI()
	if hasCTL(ruri) {
		return req.Write(bw) // its error
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	bw.WriteString(method)
	bw.WriteByte(' ')
	bw.WriteString(ruri)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	ua := "Go-http-client/1.1" // net/http's default, sent unless the header is there (empty: none)
	if vv, ok := req.Header["User-Agent"]; ok {
		ua = ""
		if len(vv) > 0 {
			ua = vv[0]
		}
	}
	if ua != "" { // before the trim, as net/http: a value of blanks is sent as an empty field
		writeField(bw, "User-Agent", textproto.TrimString(ua))
	}
	if req.Close && !httpguts.HeaderValuesContainsToken(req.Header["Connection"], "close") {
		bw.WriteString("Connection: close\r\n")
	}
	if n > 0 || method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
		var num [20]byte
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(num[:0], n, 10))
		bw.WriteString("\r\n")
	}
	for k, vv := range req.Header {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		}
		for _, v := range vv {
			writeField(bw, k, textproto.TrimString(v))
		}
	}
	bw.WriteString("\r\n")
	if n == 0 {
		closeBody(req)
		return nil
	}
	return writeBody(bw, req, n)
}

// writeField writes one header line. checkRequest has refused values with
// control characters, so none needs net/http's newline replacement.
func writeField(bw *bufio.Writer, k, v string) {
	bw.WriteString(k)
	bw.WriteString(": ")
	bw.WriteString(v)
	bw.WriteString("\r\n")
}

// writeBody copies exactly n bytes of req's body, and closes it; a body
// shorter or longer than its ContentLength is net/http's error.
func writeBody(bw *bufio.Writer, req *http.Request, n int64) error {
	defer closeBody(req)
	got, err := io.Copy(bw, io.LimitReader(req.Body, n))
	if err != nil {
		return err
	}
	if got == n {
		var one [1]byte
		m, err := io.ReadFull(req.Body, one[:])
		if m == 0 && (err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF)) {
			return nil
		}
		if err != nil && m == 0 {
			return err
		}
		got += int64(m) // more than it said: net/http's error, with a count that is at least one more
	}
	return fmt.Errorf("http: ContentLength=%d with Body length %d", n, got)
}

// plainLength is the length net/http would frame req's body with, and
// whether that is a Content-Length (or none): no body is 0; a body with a
// ContentLength of 0 would be chunked, and a ContentLength without a body
// is net/http's error.
func plainLength(req *http.Request) (int64, bool) {
	if req.Body == nil || req.Body == http.NoBody {
		return 0, req.ContentLength == 0
	}
	return req.ContentLength, req.ContentLength > 0
}

// plainHost is the Host line's value where net/http would write it
// unchanged: the request's Host, else its URL's, all printable ASCII (no
// Punycode to apply) and without an IPv6 zone to remove. An invalid Host
// is left to req.Write, which sends none.
func plainHost(req *http.Request) (string, bool) {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; c <= ' ' || c >= 0x7f || c == '%' {
			return "", false
		}
	}
	return host, httpguts.ValidHostHeader(host)
}

// hasCTL reports whether s holds an ASCII control character, which
// net/http refuses in a request's target.
func hasCTL(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }) >= 0
}
