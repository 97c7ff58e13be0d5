//go:build unix

package podconn

import (
	"bufio"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// waitReadable blocks until c's socket has something for a reader: bytes,
// the end of the stream or an error (netpoll, no sleeping). It reads
// nothing (MSG_PEEK).
func waitReadable(t *testing.T, c net.Conn) {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		return !(n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// socketDialer dials loopback and keeps its connections unwrapped (the idle
// check sees their sockets).
type socketDialer struct{ conns []net.Conn }

func (d *socketDialer) dial(network, addr string) (net.Conn, error) {
	c, err := net.Dial(network, addr)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

// TestIdleConnectionThePodClosed: a pod that closes a connection after its
// answer (uvicorn's keep-alive timeout) leaves an idle connection that
// would fail the next POST; the idle check finds it closed and the POST
// goes on a new connection.
func TestIdleConnectionThePodClosed(t *testing.T) {
	pod := newRawPod(t, func(n int, c net.Conn) {
		br := bufio.NewReader(c)
		if _, ok := readRequest(t, br); !ok {
			return
		}
		_, _ = io.WriteString(c, okResponse)
		if n > 1 {
			serveOK(t, c)
		}
		// the first connection: closed, idle, from the pod's side
	})
	d := &socketDialer{}
	tr := &Transport{DialContext: dialFunc(d.dial), ResponseHeaderTimeout: 10 * time.Second} // a failure errs, not hangs
	defer tr.CloseIdleConnections()
	if _, body, err := get(t, tr, pod.url, `{"a":1}`); err != nil || body != "ok" {
		t.Fatalf("first = %q, %v", body, err)
	}
	waitReadable(t, d.conns[0]) // the pod's FIN has arrived
	if _, body, err := get(t, tr, pod.url, `{"a":2}`); err != nil || body != "ok" {
		t.Fatalf("POST after the pod closed the idle connection = %q, %v", body, err)
	}
	if got := pod.conns.Load(); got != 2 {
		t.Errorf("connections = %d, want 2", got)
	}
}

// TestBytesAfterTheBody: what follows a response on its connection (in the
// same read, or later while it is idle) is owed to no request: the
// connection is not reused, and the next request gets its own answer.
func TestBytesAfterTheBody(t *testing.T) {
	for _, tt := range []struct {
		name  string
		later bool // the extra bytes come after the body was read
	}{{"same read", false}, {"while idle", true}} {
		t.Run(tt.name, func(t *testing.T) {
			bodyRead := make(chan struct{})
			pod := newRawPod(t, func(n int, c net.Conn) {
				br := bufio.NewReader(c)
				if _, ok := readRequest(t, br); !ok || n > 1 {
					if ok {
						_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")
					}
					return
				}
				extra := "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale"
				if !tt.later {
					_, _ = io.WriteString(c, okResponse+extra)
					_, _ = io.Copy(io.Discard, br)
					return
				}
				_, _ = io.WriteString(c, okResponse)
				<-bodyRead
				_, _ = io.WriteString(c, extra)
				_, _ = io.Copy(io.Discard, br)
			})
			d := &socketDialer{}
			tr := &Transport{DialContext: dialFunc(d.dial), ResponseHeaderTimeout: 10 * time.Second} // a failure errs, not hangs
			defer tr.CloseIdleConnections()
			if _, body, err := get(t, tr, pod.url, ""); err != nil || body != "ok" {
				t.Fatalf("first = %q, %v", body, err)
			}
			close(bodyRead)
			if tt.later {
				waitReadable(t, d.conns[0])
			}
			if _, body, err := get(t, tr, pod.url, ""); err != nil || body != "second" {
				t.Fatalf("second = %q, %v; want the second connection's answer", body, err)
			}
			if got := pod.conns.Load(); got != 2 {
				t.Errorf("connections = %d, want 2", got)
			}
		})
	}
}
