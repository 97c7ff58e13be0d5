package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

// What gatekeeper reads of a body it refused with 413 is bounded by time,
// as nginx's lingering_time and lingering_timeout bound it, never by bytes
// (issue 35): a client that keeps sending, each piece within 5 s of the
// one before, is read for 30 s after the answer and then closed; one that
// stops is closed 5 s after its last byte; one that sends the rest of its
// body is read to its end. (net/http pauses 500 ms between its FIN and
// closing a connection whose body it did not read to the end.) On the
// bubble's clock, over in-memory connections.
func TestLingeringIsBoundedByTime(t *testing.T) {
	const piece = 1 << 10
	tests := []struct {
		name    string
		chunked bool
		gap     time.Duration // between two pieces of body sent after the answer
		pieces  int           // how many; -1: until the server closes
		// wantClose is when the server closes the connection, after the
		// answer, or after the last piece when fromLast.
		wantClose [2]time.Duration
		fromLast  bool
	}{
		{name: "a client that keeps sending is read for 30 s", gap: 4 * time.Second, pieces: -1,
			wantClose: [2]time.Duration{30 * time.Second, 31 * time.Second}},
		{name: "a chunked body that keeps coming is read for 30 s", chunked: true, gap: 4 * time.Second, pieces: -1,
			wantClose: [2]time.Duration{30 * time.Second, 31 * time.Second}},
		{name: "a client that stops is closed 5 s after its last byte", gap: time.Second, pieces: 3,
			wantClose: [2]time.Duration{5 * time.Second, 6 * time.Second}, fromLast: true},
		{name: "a body sent to its end is read to its end", pieces: (1 << 20) / piece,
			wantClose: [2]time.Duration{0, 0}, fromLast: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, l := newPipeProxy(t, nil, func(o *testOptions) { o.Policy.MaxBodyBytes = 64 << 10 })
				c := l.dial(t)
				answered, closed := make(chan time.Time, 1), make(chan time.Time, 1)
				go func() { // the client's reading half
					br := bufio.NewReader(c)
					res, err := http.ReadResponse(br, nil)
					if err != nil || res.StatusCode != http.StatusRequestEntityTooLarge {
						t.Errorf("response %v, %v; want 413", res, err)
					} else {
						_, _ = io.Copy(io.Discard, res.Body)
					}
					answered <- time.Now()
					_, _ = br.Read(make([]byte, 1)) // until the server closes
					closed <- time.Now()
				}()
				head := "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n"
				var lead []byte // what it takes for the server to refuse the body
				if tt.chunked {
					head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
					lead = chunk(bytes.Repeat([]byte("x"), 65<<10))
				}
				if _, err := c.Write(append([]byte(head), lead...)); err != nil {
					t.Fatalf("sending the request: %v", err)
				}
				from := <-answered
				body := bytes.Repeat([]byte("x"), piece)
				if tt.chunked {
					body = chunk(body)
				}
				for i := 0; tt.pieces < 0 || i < tt.pieces; i++ {
					if i > 0 {
						time.Sleep(tt.gap)
					}
					if _, err := c.Write(body); err != nil {
						break // the server closed
					}
					if tt.fromLast {
						from = time.Now()
					}
				}
				if d := (<-closed).Sub(from); d < tt.wantClose[0] || d > tt.wantClose[1] {
					t.Errorf("the server closed %v after the %s, want within %v", d, map[bool]string{false: "answer", true: "last piece"}[tt.fromLast], tt.wantClose)
				}
			})
		})
	}
}

// chunk frames b as one chunk of a chunked body.
func chunk(b []byte) []byte {
	return append(fmt.Appendf(nil, "%x\r\n", len(b)), append(b, "\r\n"...)...)
}
