package framing

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

func itoa(n int) string   { return strconv.Itoa(n) }
func hexLen(n int) string { return strconv.FormatInt(int64(n), 16) }

// Bodies that look like framing: as body bytes they are data, not headers.
const (
	headerText   = "Content-Length: 1\r\n Folded: x\r\n\r\n"
	hiddenAmbig  = "POST /pause HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
	prettyJSON   = "{\r\n  \"a\": 1\r\n}\r\n\r\n"
	chunkedFolds = "Content-Length: 1\r\n\tFolded\r\n\r\n"
)

// framingCases are byte streams as a client sends them on one connection,
// and whether the scanner must call them ambiguous.
var framingCases = []struct {
	name   string
	stream string
	want   bool
}{
	{"plain", "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}", false},
	{"chunked only", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", false},
	{"chunked, extensions, upper hex, trailers", "POST / HTTP/1.1\r\nTransfer-Encoding: CHUNKED\r\n\r\n" +
		"A;name=\"v\"\r\n0123456789\r\n1 \r\nx\r\n0;end\r\nX-Trailer: 1\r\n\r\n", false},
	{"identical content lengths", "POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", false},
	{"no body", "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n", false},
	{"HTTP/1.0 with a length", "POST / HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}", false},
	{"blank lines between requests", "POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}\r\n\r\nGET / HTTP/1.1\r\n\r\n", false},
	{"bare LF lines", "POST / HTTP/1.1\nContent-Length: 2\n\n{}GET / HTTP/1.1\n\n", false},
	{"body holds header text", "POST / HTTP/1.1\r\nContent-Length: " + itoa(len(headerText)) + "\r\n\r\n" + headerText, false},
	{"body holds a whole ambiguous request", "POST / HTTP/1.1\r\nContent-Length: " + itoa(len(hiddenAmbig)) + "\r\n\r\n" +
		hiddenAmbig, false},
	{"chunk data holds header text", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" +
		hexLen(len(chunkedFolds)) + "\r\n" + chunkedFolds + "\r\n0\r\n\r\n", false},
	{"pretty JSON body", "POST / HTTP/1.1\r\nContent-Length: " + itoa(len(prettyJSON)) + "\r\n\r\n" + prettyJSON, false},

	{"both", "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true},
	{"both, chunked first, case", "POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\nCONTENT-LENGTH: 5\r\n\r\n", true},
	{"both, space before colon", "POST / HTTP/1.1\r\nContent-Length : 5\r\nTransfer-Encoding: chunked\r\n\r\n", true},
	{"both, bare LF", "POST / HTTP/1.1\nContent-Length: 1\nTransfer-Encoding: chunked\n\n", true},
	{"fold", "POST / HTTP/1.1\r\nX-A: a\r\n b\r\nContent-Length: 0\r\n\r\n", true},
	{"tab fold", "GET / HTTP/1.1\r\nX-A: a\r\n\tb\r\n\r\n", true},
	{"fold on the first header line", "GET / HTTP/1.1\r\n Host: a\r\n\r\n", true},
	{"fold in a trailer", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: a\r\n b\r\n\r\n", true},
	{"HTTP/1.0 chunked", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true},
	{"chunked not alone", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", true},
	{"transfer encoding twice", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", true},
	{"content lengths differ", "POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", true},
	{"signed content length", "POST / HTTP/1.1\r\nContent-Length: +2\r\n\r\n{}", true},
	{"empty content length", "POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", true},
	{"chunk size not hex", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", true},
	{"chunk size empty", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n;x\r\n", true},
	{"chunk size with a space inside", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1 ;x\r\nx\r\n0\r\n\r\n", true},
	{"chunk size too long", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000001\r\nx\r\n", true},
	{"chunk size bare LF", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\n{}\r\n0\r\n\r\n", true},
	{"chunk size with a bare CR", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r;x\r\n{}\r\n0\r\n\r\n", true},
	{"chunk data too long", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}}\r\n0\r\n\r\n", true},
	{"chunk data without CRLF", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\n0\r\n\r\n", true},

	// Keep-alive: the next request's headers are checked even when the body
	// before it ends without a newline.
	{"after a JSON body", "POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}" +
		"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", true},
	{"fold after a JSON body", "POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}" +
		"POST / HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n", true},
	{"after a chunked body", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n" +
		"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", true},
	{"after a trailer", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\r\n\r\n" +
		"GET / HTTP/1.1\r\nX-A: a\r\n\tb\r\n\r\n", true},
	{"after a bodiless request", "GET / HTTP/1.1\r\nHost: a\r\n\r\n" +
		"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", true},
	{"third request", "GET / HTTP/1.1\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc" +
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n", true},
	{"sticky", "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\nGET / HTTP/1.1\r\n\r\n", true},
}

// scanInReads feeds stream to a fresh scanner in reads of size bytes and
// returns the verdict after the last read.
func scanInReads(stream string, size int) bool {
	var s framingScanner
	got := false
	for b := []byte(stream); len(b) > 0; {
		n := min(size, len(b))
		got = s.scan(b[:n])
		b = b[n:]
	}
	return got
}

func TestFramingScanner(t *testing.T) {
	for _, tt := range framingCases {
		t.Run(tt.name, func(t *testing.T) {
			for _, size := range []int{1, 2, 3, 7, 4096} { // any read boundaries
				if got := scanInReads(tt.stream, size); got != tt.want {
					t.Errorf("reads of %d bytes: ambiguous = %v, want %v", size, got, tt.want)
				}
			}
		})
	}
}

// TestFramingScannerAgreesWithGo reads each clean stream with Go's own
// request parser and checks that it finds the requests the scanner found:
// the scanner frames bodies as Go does.
func TestFramingScannerAgreesWithGo(t *testing.T) {
	for _, tt := range framingCases {
		if tt.want {
			continue
		}
		t.Run(tt.name, func(t *testing.T) {
			scanned, between := scannerRequests(tt.stream)
			if !between {
				t.Error("the scanner did not end between requests")
			}
			read, err := goRequests(tt.stream)
			if err != nil {
				t.Fatalf("Go cannot read a stream the scanner calls clean: %v", err)
			}
			if read != scanned {
				t.Errorf("Go read %d requests, the scanner %d", read, scanned)
			}
		})
	}
}

// scannerRequests counts the request lines the scanner finds in stream and
// reports whether it ends between requests. It counts a byte at a time, so
// it starts past the HTTP/2 preface check: bytes that check holds back are
// scanned in one go when the stream turns out to be HTTP/1 (as they would
// have been, one at a time), where a request line could start and end
// unseen (FuzzFramingScanner found "PRI * HTTP/2.0\r\n\n"). Streams that
// open with the preface are not HTTP/1 and not counted.
func scannerRequests(stream string) (n int, between bool) {
	s := framingScanner{notH2: true}
	for i := range len(stream) {
		before := s.state
		s.scan([]byte(stream[i : i+1]))
		if before == stRequestLine && s.state == stHeader {
			n++
		}
	}
	return n, s.state == stRequestLine && s.line.n == 0
}

// goRequests counts the requests Go's parser reads from stream, bodies
// included, skipping CR and LF between requests as Go's server does after a
// POST. An error means Go's server would close the connection there: the
// parser's own, or one of the server's checks on what it parsed
// (serverRefuses).
func goRequests(stream string) (int, error) {
	br := bufio.NewReader(strings.NewReader(stream))
	n := 0
	for {
		for {
			if b, err := br.Peek(1); err != nil || (b[0] != '\r' && b[0] != '\n') {
				break
			}
			_, _ = br.Discard(1)
		}
		req, err := http.ReadRequest(br)
		if err == io.EOF {
			return n, nil
		}
		if err == nil {
			err = serverRefuses(req)
		}
		if err != nil {
			return n, err
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return n, err
		}
		n++
	}
}

// serverRefuses is what Go's server refuses, with a 400 or 505 and a closed
// connection, of a request http.ReadRequest reads (net/http's readRequest
// and http1ServerSupportsRequest): a version other than HTTP/1 (but for
// HTTP/2's preface line), a header name or value that is not a valid field
// ("Content-Length :5" is a header named "Content-Length " to the parser,
// and refused by the server, where the scanner frames by its length).
func serverRefuses(req *http.Request) error {
	if req.ProtoMajor != 1 && (req.Method != "PRI" || req.RequestURI != "*" || req.Proto != "HTTP/2.0") {
		return errors.New("505: unsupported protocol version")
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return errors.New("400: invalid header name")
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return errors.New("400: invalid header value")
			}
		}
	}
	return nil
}

func TestFramingScannerLongLines(t *testing.T) {
	long := "POST /" + strings.Repeat("a", 10000) + " HTTP/1.1\r\nX-Big: " + strings.Repeat("b", 100000) +
		"\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
	for _, size := range []int{1, 100, len(long)} {
		if !scanInReads(long, size) {
			t.Errorf("reads of %d bytes: a long request line and header hid the ambiguity", size)
		}
	}
	// A Content-Length no reader of 64 bytes can see whole is refused.
	padded := "POST / HTTP/1.1\r\nContent-Length: " + strings.Repeat(" ", 60) + "2\r\n\r\n{}"
	if !scanInReads(padded, 4096) {
		t.Error("a Content-Length value past the kept prefix was trusted")
	}
}

// TestFramingScannerBounded checks that a large body costs no memory: the
// scanner skips it without allocating.
func TestFramingScannerBounded(t *testing.T) {
	body := bytes.Repeat([]byte("x\n"), 1<<20)
	head := []byte("POST / HTTP/1.1\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n")
	chunk := append([]byte(hexLen(len(body))+";ext\r\n"), body...)
	chunked := []byte("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
	allocs := testing.AllocsPerRun(5, func() {
		var s framingScanner
		s.scan(head)
		s.scan(body)
		var c framingScanner
		c.scan(chunked)
		c.scan(chunk)
		if s.state != stRequestLine || c.state != stChunkEnd {
			t.Fatalf("states %d, %d after the bodies", s.state, c.state)
		}
	})
	if allocs != 0 {
		t.Errorf("scanning 2 MiB bodies allocated %v times", allocs)
	}
}

// TestGuardConnForwardsCloseWrite checks that net/http can still half-close
// a guarded TCP connection (it does so before closing a connection whose
// request body it did not read, so the client gets the response, not a reset).
func TestGuardConnForwardsCloseWrite(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	gl := Guard(l)
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := gl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	cw, ok := server.(interface{ CloseWrite() error })
	if !ok {
		t.Fatal("a guarded connection has no CloseWrite")
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite() = %v", err)
	}
	if n, err := client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("client Read after CloseWrite = %d, %v, want 0, EOF", n, err)
	}
}

// BenchmarkFramingScanner measures what the guard adds to each read: a
// typical SDK request (headers and a 1 KiB JSON body) in one read.
func BenchmarkFramingScanner(b *testing.B) {
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 1000) + `"}]}`
	req := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: gk:8080\r\nUser-Agent: OpenAI/JS 5.0\r\n" +
		"Accept: application/json\r\nAuthorization: Bearer sk-0123456789\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + itoa(len(body)) + "\r\n\r\n" + body)
	var s framingScanner
	b.ReportAllocs()
	b.SetBytes(int64(len(req)))
	for b.Loop() {
		if s.scan(req) {
			b.Fatal("ambiguous")
		}
	}
}

func FuzzFramingScanner(f *testing.F) {
	for _, tt := range framingCases {
		f.Add([]byte(tt.stream), uint8(3))
	}
	f.Add(append(slices.Clip(h2Preface), "\x00\x00\x00\x04\x00\x00\x00\x00\x00"...), uint8(7)) // HTTP/2
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nGET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n"), uint8(5))      // not quite
	f.Fuzz(func(t *testing.T, stream []byte, size uint8) {
		whole := scanInReads(string(stream), len(stream)+1)
		if got := scanInReads(string(stream), int(size)+1); got != whole {
			t.Errorf("reads of %d bytes: ambiguous = %v, in one read %v", int(size)+1, got, whole)
		}
		if whole || bytes.HasPrefix(stream, h2Preface) || bytes.HasPrefix(h2Preface, stream) {
			return // an HTTP/2 connection, or the start of one: Go's server reads no HTTP/1 requests there
		}
		// Where Go's parser reads the whole stream, the scanner must find
		// the same requests: otherwise it checks headers Go never reads as
		// headers, and misses some it does.
		read, err := goRequests(string(stream))
		if err != nil {
			return
		}
		if scanned, _ := scannerRequests(string(stream)); scanned != read {
			t.Errorf("Go read %d requests, the scanner %d", read, scanned)
		}
	})
}

// TestFramingScannerHTTP2Preface: a connection that opens with HTTP/2's
// preface is not scanned (its frames are not HTTP/1, and Go's server reads
// no HTTP/1 request after it), whatever follows; one that opens with part of
// it and then goes on otherwise is scanned as HTTP/1 from its first byte, as
// Go's server reads it.
func TestFramingScannerHTTP2Preface(t *testing.T) {
	frames := "\x00\x00\x00\x04\x00\x00\x00\x00\x00" + // an empty SETTINGS frame
		"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n" // bytes that are not framing here
	ambiguous := "\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
	for _, tt := range []struct {
		name   string
		stream string
		want   bool
	}{
		{"the preface and frames", string(h2Preface) + frames, false},
		{"the preface alone", string(h2Preface), false},
		{"PRI with headers", "PRI * HTTP/2.0" + ambiguous, true},
		{"the preface's first line, then a request", "PRI * HTTP/2.0\r\n\r\nPOST / HTTP/1.1" + ambiguous, true},
		{"the preface but its last byte", string(h2Preface[:len(h2Preface)-1]) + "x" + ambiguous, true},
		{"a blank line before it", "\r\n" + string(h2Preface) + "POST / HTTP/1.1" + ambiguous, true},
		{"after a request", "GET / HTTP/1.1\r\n\r\n" + string(h2Preface) + "POST / HTTP/1.1" + ambiguous, true},
		{"P as in POST", "POST / HTTP/1.1" + ambiguous, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, size := range []int{1, 2, 3, 7, 23, 24, 4096} {
				if got := scanInReads(tt.stream, size); got != tt.want {
					t.Errorf("reads of %d bytes: ambiguous = %v, want %v", size, got, tt.want)
				}
			}
		})
	}
}
