package proxy

import (
	"strings"
	"testing"
)

func TestFramingScanner(t *testing.T) {
	body := `{"model":"m","prompt":"Content-Length: 3 Transfer-Encoding: chunked"}`
	tests := []struct {
		name   string
		stream string
		want   bool
	}{
		{"plain", "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}", false},
		{"chunked only", "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", false},
		{"both", "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true},
		{"both, case and spaces", "POST / HTTP/1.1\r\ncontent-length : 5\r\nTRANSFER-ENCODING: chunked\r\n\r\n", true},
		{"fold", "POST / HTTP/1.1\r\nX-A: a\r\n b\r\nContent-Length: 0\r\n\r\n", true},
		{"tab fold", "GET / HTTP/1.1\r\nX-A: a\r\n\tb\r\n\r\n", true},
		{"bare LF lines", "POST / HTTP/1.1\nContent-Length: 1\nTransfer-Encoding: chunked\n\n", true},
		{"body mentions the headers", "POST / HTTP/1.1\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n" + body, false},
		{"pretty JSON body with CRLF indentation", "POST / HTTP/1.1\r\nContent-Length: 20\r\n\r\n{\r\n  \"a\": 1\r\n}", false},
		{"second request ambiguous", "GET / HTTP/1.1\r\nHost: a\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", true},
		{"request line hidden in a body", "POST / HTTP/1.1\r\nContent-Length: 60\r\n\r\nPOST /pause HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: x\r\n\r\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, size := range []int{1, 3, 7, 4096} { // any read boundaries
				var s framingScanner
				got := false
				for b := []byte(tt.stream); len(b) > 0; {
					n := min(size, len(b))
					got = s.scan(b[:n]) || got
					b = b[n:]
				}
				if got != tt.want {
					t.Errorf("reads of %d bytes: ambiguous = %v, want %v", size, got, tt.want)
				}
			}
		})
	}
}

func TestFramingScannerLongLines(t *testing.T) {
	var s framingScanner
	long := "POST /" + strings.Repeat("a", 10000) + " HTTP/1.1\r\nX-Big: " + strings.Repeat("b", 100000) +
		"\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
	if !s.scan([]byte(long)) {
		t.Error("a long request line and header hid the ambiguity")
	}
	if len(s.head) > scanKeep || cap(s.tail) > 4*scanKeep+len(long) {
		t.Errorf("scanner kept %d/%d bytes", len(s.head), len(s.tail))
	}
}
