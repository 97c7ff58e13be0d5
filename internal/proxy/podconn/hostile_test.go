package podconn

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

const okResponse = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

// serveOK answers every request on c with okResponse until c ends.
func serveOK(t *testing.T, c net.Conn) {
	br := bufio.NewReader(c)
	for {
		if _, ok := readRequest(t, br); !ok {
			return
		}
		if _, err := io.WriteString(c, okResponse); err != nil {
			return
		}
	}
}

// TestOversizedHeaders: a pod whose headers never end is an error once
// MaxResponseHeaderBytes were read, and no more is read from it; headers
// within the bound pass.
func TestOversizedHeaders(t *testing.T) {
	const bound = 4 << 10
	pad := "X-Pad: " + strings.Repeat("a", 100) + "\r\n"
	for _, tt := range []struct {
		name  string
		lines int // -1: without end
	}{{"within the bound", 30}, {"endless", -1}} {
		t.Run(tt.name, func(t *testing.T) {
			pod := newRawPod(t, func(_ int, c net.Conn) {
				if _, ok := readRequest(t, bufio.NewReader(c)); !ok {
					return
				}
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n")
				for i := 0; tt.lines < 0 || i < tt.lines; i++ {
					if _, err := io.WriteString(c, pad); err != nil {
						return // the transport gave up
					}
				}
				_, _ = io.WriteString(c, "Content-Length: 2\r\n\r\nok")
			})
			d := &trackingDialer{}
			tr := &Transport{DialContext: d.DialContext, MaxResponseHeaderBytes: bound}
			defer tr.CloseIdleConnections()
			_, body, err := get(t, tr, pod.url, "")
			if tt.lines >= 0 {
				if err != nil || body != "ok" {
					t.Fatalf("response = %q, %v", body, err)
				}
				return
			}
			if !errors.Is(err, errHeaderTooLarge) {
				t.Fatalf("error = %v, want errHeaderTooLarge", err)
			}
			if got := d.conn(0).read.Load(); got > bound {
				t.Errorf("read %d bytes, want at most %d", got, bound)
			}
			if !d.conn(0).closed.Load() {
				t.Error("connection left open")
			}
		})
	}
}

// TestRetry is http.Transport's rule for a reused connection that fails: a
// request none of which was written goes again on a new connection (once);
// one that was written goes again only when replaying it is harmless.
func TestRetry(t *testing.T) {
	tests := []struct {
		name      string
		method    string
		noGetBody bool
		fail      string // "write": the reused connection's write fails; "unanswered": the pod reads the request and closes
		wantOK    bool
		wantDials int
	}{
		{name: "unwritten POST", method: "POST", fail: "write", wantOK: true, wantDials: 2},
		{name: "unwritten POST without GetBody", method: "POST", noGetBody: true, fail: "write", wantDials: 1},
		{name: "unanswered GET", method: "GET", fail: "unanswered", wantOK: true, wantDials: 2},
		{name: "unanswered POST", method: "POST", fail: "unanswered", wantDials: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got atomic.Int64 // requests the pod read
			pod := newRawPod(t, func(n int, c net.Conn) {
				br := bufio.NewReader(c)
				for i := 0; ; i++ {
					if _, ok := readRequest(t, br); !ok {
						return
					}
					got.Add(1)
					if n == 1 && i == 1 {
						return // the second request on the first connection: no answer
					}
					_, _ = io.WriteString(c, okResponse)
				}
			})
			d := &trackingDialer{}
			tr := &Transport{DialContext: d.DialContext}
			defer tr.CloseIdleConnections()
			if _, _, err := get(t, tr, pod.url, ""); err != nil {
				t.Fatal(err)
			}
			if tt.fail == "write" {
				d.conn(0).failWrite.Store(true)
			}
			req, _ := http.NewRequest(tt.method, pod.url, nil)
			if tt.method == "POST" {
				req, _ = http.NewRequest(tt.method, pod.url, strings.NewReader(`{"p":1}`))
			}
			if tt.noGetBody {
				req.GetBody = nil
			}
			res, err := tr.RoundTrip(req)
			if (err == nil) != tt.wantOK {
				t.Fatalf("error = %v, want success %v", err, tt.wantOK)
			}
			if err == nil {
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if string(b) != "ok" || res.Request != req {
					t.Errorf("body %q, Request is the one sent %v", b, res.Request == req)
				}
			}
			if n := d.dialled(); n != tt.wantDials {
				t.Errorf("dials = %d, want %d", n, tt.wantDials)
			}
		})
	}
}
