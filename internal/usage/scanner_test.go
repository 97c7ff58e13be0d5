package usage

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestScannerChunks feeds each body of usageCases to a Scanner in pieces of
// several sizes, as Envoy's body messages split it, and expects what Watch
// reports for the same response.
func TestScannerChunks(t *testing.T) {
	for _, tt := range usageCases {
		for _, n := range []int{1, 7, 4096, 62000} {
			t.Run(fmt.Sprintf("%s/chunk%d", tt.name, n), func(t *testing.T) {
				if n < 7 && len(tt.body) > 256<<10 {
					t.Skip("large body: covered by larger chunks")
				}
				res := usageResponse(tt.status, tt.contentType, tt.encoding, nil)
				var s Scanner
				s.Reset(res.StatusCode, res.Header.Get("Content-Type"), res.Header.Get("Content-Encoding"), res.ContentLength)
				for body := tt.body; body != ""; {
					k := min(n, len(body))
					if w, err := s.Write([]byte(body[:k])); w != k || err != nil {
						t.Fatalf("Write(%d bytes) = %d, %v; want %d, nil", k, w, err, k)
					}
					body = body[k:]
				}
				want := tt.want
				if res.StatusCode != http.StatusOK {
					want = Tokens{}
				}
				if got := s.Result(true); got != want {
					t.Fatalf("Result(true) = %v, want %v", got, want)
				}
			})
		}
	}
}

// TestScannerEarlyEnd: a body cut before its end gives the SSE usage seen so
// far and an unknown JSON usage, as a Body closed early reports; Reset
// forgets the response before.
func TestScannerEarlyEnd(t *testing.T) {
	tests := []struct {
		name, contentType, body string
		want                    Tokens
	}{
		{"sse", sseType, sseChunk("a", usageOf(3, 1)) + sseChunk("b", usageOf(3, 2)), Tokens{Prompt: 3, Completion: 2, Known: true}},
		{"json", jsonType, `{"usage":` + usageOf(1, 1) + `}`, Tokens{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Scanner
			s.Reset(200, sseType, "", -1)
			s.Write([]byte(sseChunk("z", usageOf(9, 9))))
			s.Reset(200, tt.contentType, "", -1)
			s.Write([]byte(tt.body + "more"))
			if got := s.Result(false); got != tt.want {
				t.Fatalf("Result(false) = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestScannerZeroValue: before Reset, and after a Reset on a response that
// is not read, a Scanner keeps nothing and knows no usage.
func TestScannerZeroValue(t *testing.T) {
	body := []byte(sseChunk("a", usageOf(1, 1)))
	var zero Scanner
	zero.Write(body)
	var gz Scanner
	gz.Reset(200, sseType, "gzip", -1)
	gz.Write(body)
	var big Scanner
	big.Reset(200, jsonType, "", jsonBodyLimit+1)
	big.Write([]byte(`{"usage":` + usageOf(1, 1) + `}` + strings.Repeat(" ", 8)))
	for name, s := range map[string]*Scanner{"zero": &zero, "gzip": &gz, "json over the cap": &big} {
		if got := s.Result(true); got != (Tokens{}) || len(s.scan.buf) != 0 {
			t.Errorf("%s: Result(true) = %v holding %d bytes, want unknown and nothing held", name, got, len(s.scan.buf))
		}
	}
}
