package podconn

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// closeTracker is a request body that records its Close.
type closeTracker struct {
	io.Reader
	closed bool
}

func (c *closeTracker) Close() error { c.closed = true; return nil }

// TestWriteRequestAsNetHTTP checks writeRequest against (*http.Request).Write:
// what each wrote, read back by net/http's server parser, is the same
// request, for the requests gatekeeper sends and for those it hands to
// req.Write; and both close the body.
func TestWriteRequestAsNetHTTP(t *testing.T) {
	type spec struct {
		name, method, url, body string
		length                  int64 // ContentLength; -2: len(body)
		noBody                  bool
		header                  http.Header
		host                    string
		close                   bool
		trailer                 http.Header
	}
	for _, s := range []spec{
		{name: "json post", method: "POST", url: "http://pod:8000/v1/completions", body: `{"model":"m","prompt":"x"}`, length: -2,
			header: http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"r1"}, "Traceparent": {"00-a-b-01"}, "User-Agent": {""}}},
		{name: "get no body", method: "GET", url: "http://pod:8000/v1/models?x=1&y=%20", noBody: true},
		{name: "empty method", method: "", url: "http://pod:8000/health", noBody: true},
		{name: "post no body", method: "POST", url: "http://pod:8000/x", noBody: true},
		{name: "delete no body", method: "DELETE", url: "http://pod:8000/x", noBody: true},
		{name: "head", method: "HEAD", url: "http://pod:8000/x", noBody: true},
		{name: "user agent and values", method: "POST", url: "http://pod:8000/x", body: "abc", length: 3,
			header: http.Header{"User-Agent": {"  sdk/1.0 ", "second"}, "Accept": {"a", " b "}, "Trailer": {"X"}, "Transfer-Encoding": {"gzip"}, "Host": {"evil"}}},
		{name: "user agent of blanks", method: "GET", url: "http://pod:8000/x", noBody: true, // an empty field, as net/http
			header: http.Header{"User-Agent": {"  "}}},
		{name: "close", method: "POST", url: "http://pod:8000/x", body: "abc", length: 3, close: true},
		{name: "close already said", method: "POST", url: "http://pod:8000/x", body: "abc", length: 3, close: true,
			header: http.Header{"Connection": {"close"}}},
		{name: "host override", method: "GET", url: "http://pod:8000/x", noBody: true, host: "api.example:443"},
		{name: "ipv6", method: "GET", url: "http://[::1]:8000/x", noBody: true},
		// Handed to req.Write:
		{name: "unknown length", method: "POST", url: "http://pod:8000/x", body: "chunked please", length: 0},
		{name: "trailer", method: "POST", url: "http://pod:8000/x", body: "abc", length: -1, trailer: http.Header{"X-Sum": {"1"}}},
		{name: "unicode host", method: "GET", url: "http://pod:8000/x", noBody: true, host: "bücher.example"},
		{name: "zone", method: "GET", url: "http://[fe80::1%25eth0]:8000/x", noBody: true},
		{name: "connect", method: "CONNECT", url: "http://pod:8000", noBody: true},
	} {
		t.Run(s.name, func(t *testing.T) {
			mk := func() (*http.Request, *closeTracker) {
				u, err := url.Parse(s.url)
				if err != nil {
					t.Fatal(err)
				}
				req := &http.Request{Method: s.method, URL: u, Header: s.header.Clone(), Host: s.host, Close: s.close, Trailer: s.trailer}
				if req.Header == nil {
					req.Header = http.Header{}
				}
				if s.noBody {
					return req, nil
				}
				b := &closeTracker{Reader: strings.NewReader(s.body)}
				req.Body, req.ContentLength = b, s.length
				if s.length == -2 {
					req.ContentLength = int64(len(s.body))
				}
				return req, b
			}
			var ours, theirs bytes.Buffer
			req, body := mk()
			bw := bufio.NewWriter(&ours)
			errOurs := writeRequest(bw, req)
			_ = bw.Flush()
			if body != nil && !body.closed {
				t.Error("writeRequest left the body open")
			}
			req, _ = mk()
			errTheirs := req.Write(&theirs)
			if (errOurs == nil) != (errTheirs == nil) {
				t.Fatalf("errors: ours %v, net/http's %v", errOurs, errTheirs)
			}
			if errOurs != nil {
				return
			}
			a, b := readBack(t, ours.Bytes()), readBack(t, theirs.Bytes())
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("ours read back as\n%+v\nnet/http's as\n%+v\nours:\n%s\nnet/http's:\n%s", a, b, ours.Bytes(), theirs.Bytes())
			}
		})
	}
}

// sent is what a server reads of a request.
type sent struct {
	Method, RequestURI, Proto, Host string
	Header, Trailer                 http.Header
	ContentLength                   int64
	TransferEncoding                []string
	Close                           bool
	Body                            string
}

func readBack(t *testing.T, raw []byte) sent {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(raw))
	req, err := http.ReadRequest(br)
	if err != nil {
		t.Fatalf("%v reading back\n%s", err, raw)
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatalf("%v reading the body back\n%s", err, raw)
	}
	if br.Buffered() != 0 {
		t.Fatalf("%d bytes after the request\n%s", br.Buffered(), raw)
	}
	return sent{req.Method, req.RequestURI, req.Proto, req.Host, req.Header, req.Trailer, req.ContentLength,
		req.TransferEncoding, req.Close, string(b)}
}

// TestWriteRequestBodyLength checks that a body shorter or longer than its
// ContentLength is an error, as net/http's.
func TestWriteRequestBodyLength(t *testing.T) {
	for _, tt := range []struct {
		body string
		n    int64
	}{{"ab", 3}, {"abcd", 3}} {
		u, _ := url.Parse("http://pod:8000/x")
		req := &http.Request{Method: "POST", URL: u, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(tt.body)), ContentLength: tt.n}
		bw := bufio.NewWriter(io.Discard)
		if err := writeRequest(bw, req); err == nil || !strings.Contains(err.Error(), "ContentLength=3") {
			t.Errorf("body %q, ContentLength %d: %v, want net/http's length error", tt.body, tt.n, err)
		}
	}
}

// FuzzWriteRequest: for any request RoundTrip would send (checkRequest
// passes it), what writeRequest writes reads back as what req.Write
// writes does, or both fail.
func FuzzWriteRequest(f *testing.F) {
	f.Add("POST", "/v1/completions?a=b", "Content-Type", "application/json", `{"prompt":"x"}`, false, "")
	f.Add("GET", "/v1/models", "User-Agent", "", "", true, "api.example")
	f.Add("DELETE", "/x", "Connection", "keep-alive", "", false, "")
	f.Fuzz(func(t *testing.T, method, path, name, value, body string, close bool, host string) {
		u, err := url.Parse("http://pod:8000" + path)
		if err != nil || u.Host != "pod:8000" {
			return
		}
		mk := func() *http.Request {
			req := &http.Request{Method: method, URL: u, Header: http.Header{name: {value}}, Host: host, Close: close}
			if body != "" {
				req.Body, req.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
			}
			return req
		}
		if checkRequest(mk()) != nil || !httpguts.ValidHeaderFieldName(method) && method != "" {
			return
		}
		var ours, theirs bytes.Buffer
		bw := bufio.NewWriter(&ours)
		errOurs := writeRequest(bw, mk())
		_ = bw.Flush()
		errTheirs := mk().Write(&theirs)
		if (errOurs == nil) != (errTheirs == nil) {
			t.Fatalf("errors: ours %v, net/http's %v", errOurs, errTheirs)
		}
		if errOurs != nil {
			return
		}
		a, errA := readBackErr(ours.Bytes())
		b, errB := readBackErr(theirs.Bytes())
		if (errA == nil) != (errB == nil) || !reflect.DeepEqual(a, b) {
			t.Fatalf("ours read back as\n%+v (%v)\nnet/http's as\n%+v (%v)\nours:\n%q\nnet/http's:\n%q", a, errA, b, errB, ours.Bytes(), theirs.Bytes())
		}
	})
}

func readBackErr(raw []byte) (sent, error) {
	br := bufio.NewReader(bytes.NewReader(raw))
	req, err := http.ReadRequest(br)
	if err != nil {
		return sent{}, err
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return sent{}, err
	}
	return sent{req.Method, req.RequestURI, req.Proto, req.Host, req.Header, req.Trailer, req.ContentLength,
		req.TransferEncoding, req.Close, string(b)}, nil
}
