package podconn

import (
	"bufio"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// headSeeds are answers pods give, and answers the plain path leaves to
// http.ReadResponse, each with the method of its request.
var headSeeds = []struct{ method, raw string }{
	{"POST", "HTTP/1.1 200 OK\r\ndate: Mon, 07 Dec 2026 12:00:00 GMT\r\nserver: uvicorn\r\ncontent-length: 17\r\ncontent-type: application/json\r\n\r\n{\"id\":\"cmpl-1\"}\n\nHTTP/1.1 200 OK\r\n"},
	{"POST", "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n6\r\ndata: \r\n3;ext=1\r\n{}\n\r\n0\r\n\r\nrest"},
	{"POST", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 9\r\nX-Other:  a \r\n\r\n"},
	{"POST", "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 2\r\nContent-Length: 0\r\n\r\n"},
	{"POST", "HTTP/1.1 429 \r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"},
	{"POST", "HTTP/1.1 200\r\nContent-Length: 2\r\nConnection: keep-alive, Close\r\nX-A: 1\r\nx-a: 2\r\n\r\nok"},
	{"POST", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"},
	{"POST", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok"},
	{"POST", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"},
	{"POST", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"},
	{"POST", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n"},
	{"POST", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-Trail: 1\r\n"},
	{"POST", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"},
	{"POST", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"},
	{"POST", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"},
	{"POST", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"},
	{"POST", "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n0\r\n\r\n"},
	{"POST", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"},
	{"POST", "HTTP/1.1 200 OK\r\nContent-Length: 1 2\r\n\r\n"},
	{"POST", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n"},
	{"POST", "HTTP/1.1 200 OK\r\nX: a\r\n folded\r\nContent-Length: 0\r\n\r\n"},
	{"POST", "HTTP/1.1 200 OK\r\n Leading: x\r\nContent-Length: 0\r\n\r\n"},
	{"POST", "HTTP/1.1 200 OK\r\nBad Name: x\r\nContent-Length: 0\r\n\r\n"},
	{"POST", "HTTP/1.1 200 OK\r\nX: a\x01b\r\nContent-Length: 0\r\n\r\n"},
	{"POST", "HTTP/1.1 200 OK\nContent-Length: 2\n\nok"},
	{"POST", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\nok"},
	{"POST", "HTTP/1.1 200 OK\r\n\r\nto the close"},
	{"POST", "HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-Sum: 1\r\n\r\n"},
	{"POST", "HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 0\r\n\r\n"},
	{"POST", "HTTP/1.1 204 No Content\r\n\r\n"},
	{"POST", "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n"},
	{"HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"},
	{"POST", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"},
	{"POST", "HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n"},
	{"POST", "HTTP/1.1 20x OK\r\nContent-Length: 0\r\n\r\n"},
	{"POST", "HTTP/1.1  200 OK\r\nContent-Length: 0\r\n\r\n"},
	{"POST", "HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n"},
	{"POST", "HTTP/1.2 200 OK\r\nContent-Length: 0\r\n\r\n"},
	{"POST", "ICY 200 OK\r\nContent-Length: 0\r\n\r\n"},
	{"POST", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"},
	{"POST", ""},
	{"POST", "HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("v", 3000) + "\r\nContent-Length: 2\r\n\r\nok"},
	{"POST", "HTTP/1.1 200 OK\r\n" + strings.Repeat("x-a: b\r\n", 200) + "Content-Length: 2\r\n\r\nok"},
	{"POST", "HTTP/1.1 200 OK\r\nA-Very-Long-Header-Name-Beyond-Sixty-Four-Bytes-Of-Length-For-Canonical: 1\r\nContent-Length: 0\r\n\r\n"},
	{"POST", "HTTP/1.1 200 OK\r\ncontent-TYPE: x\r\nx-request-id: 1\r\nÿ: 1\r\nContent-Length: 0\r\n\r\n"},
	{"POST", "HTTP/1.1 200 OK\r\nX: caf\xc3\xa9\r\nContent-Length: 0\r\n\r\n"},
	{"POST", "HTTP/1.1 200 OK\r\nX:\r\nY: \t\r\nContent-Length: 0\r\n\r\n"},
	// Found by FuzzReadHead: a bare LF in the status line; chunked in HTTP/1.0 (ignored).
	{"POST", "HTTP/1.0 200 \n\r\nContent-Length:0\r\n\r\n"},
	{"POST", "HTTP/1.0 200 \r\nTrAnsfer-EnCoding:chunked\r\n\r\n000000000"},
}

// TestReadHeadAsNetHTTP checks readHead against http.ReadResponse on each
// seed, with the buffer podconn reads with and a small one.
func TestReadHeadAsNetHTTP(t *testing.T) {
	for _, s := range headSeeds {
		compareHeads(t, s.method, s.raw, readBufferSize)
		compareHeads(t, s.method, s.raw, 64)
	}
}

// TestReadHeadPlainPath checks that the answers vLLM gives take the plain
// path (the comparison above holds either way).
func TestReadHeadPlainPath(t *testing.T) {
	for _, raw := range []string{headSeeds[0].raw, headSeeds[1].raw, headSeeds[2].raw, headSeeds[3].raw, headSeeds[4].raw, headSeeds[5].raw, headSeeds[6].raw} {
		// a byte a read: the head still comes whole, over many reads
		br := bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(raw)), readBufferSize)
		head, err := peekHead(br)
		if err != nil || head == nil {
			t.Fatalf("%q: no head found (%v)", raw, err)
		}
		req, _ := http.NewRequest("POST", "http://pod/x", nil)
		if _, _, _, ok := parseHead(head, req); !ok {
			t.Errorf("%q went to http.ReadResponse", raw)
		}
	}
}

// FuzzReadHead: whatever the bytes, readHead reads what http.ReadResponse
// reads.
func FuzzReadHead(f *testing.F) {
	for _, s := range headSeeds {
		f.Add(s.method == "HEAD", s.raw)
	}
	f.Fuzz(func(t *testing.T, head bool, raw string) {
		m := "POST"
		if head {
			m = "HEAD"
		}
		compareHeads(t, m, raw, 64)
	})
}

// read is what a caller learns of one response: its head, its body (and
// whether reading it failed), its trailer and what the reader has left.
type read struct {
	Status                   string
	StatusCode               int
	Proto                    string
	ProtoMajor, ProtoMinor   int
	Header, Trailer          http.Header
	ContentLength            int64
	TransferEncoding         []string
	Close, NoBody            bool
	Body                     string
	BodyFailed               bool
	Rest                     string
	HeadFailed, Uncompressed bool
}

func readWith(fn func(*bufio.Reader, *http.Request) (*http.Response, error), method, raw string, size int, slow bool) read {
	var src io.Reader = strings.NewReader(raw)
	if slow {
		src = iotest.OneByteReader(src) // a pod that sends its answer a byte at a time
	}
	br := bufio.NewReaderSize(src, size)
	req, _ := http.NewRequest(method, "http://pod/x", nil)
	res, err := fn(br, req)
	if err != nil {
		return read{HeadFailed: true}
	}
	b, berr := io.ReadAll(res.Body)
	rest, _ := io.ReadAll(br)
	return read{res.Status, res.StatusCode, res.Proto, res.ProtoMajor, res.ProtoMinor, res.Header, res.Trailer,
		res.ContentLength, res.TransferEncoding, res.Close, res.Body == http.NoBody, string(b), berr != nil, string(rest),
		false, res.Uncompressed}
}

func compareHeads(t *testing.T, method, raw string, size int) {
	t.Helper()
	for _, slow := range []bool{false, true} {
		ours := readWith(readHead, method, raw, size, slow)
		theirs := readWith(http.ReadResponse, method, raw, size, slow)
		if !reflect.DeepEqual(ours, theirs) {
			t.Fatalf("%s %q (buffer %d, a byte a read: %v):\nours       %+v\nnet/http's %+v", method, raw, size, slow, ours, theirs)
		}
	}
}
