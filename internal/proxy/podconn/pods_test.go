package podconn

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countedPod is an httptest pod that counts the connections it accepted.
type countedPod struct {
	*httptest.Server
	conns atomic.Int64
}

func newCountedPod(t *testing.T, h http.HandlerFunc) *countedPod {
	t.Helper()
	p := &countedPod{Server: httptest.NewUnstartedServer(h)}
	p.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			p.conns.Add(1)
		}
	}
	p.Start()
	t.Cleanup(p.Close)
	return p
}

// rawPod is a pod on a loopback listener whose connections a test scripts
// byte by byte: serve runs on each accepted connection, in a goroutine of
// its own, and the connection is closed when it returns.
type rawPod struct {
	ln    net.Listener
	url   string
	conns atomic.Int64
	wg    sync.WaitGroup
}

func newRawPod(t *testing.T, serve func(n int, c net.Conn)) *rawPod {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &rawPod{ln: ln, url: "http://" + ln.Addr().String()}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(p.conns.Add(1))
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer c.Close()
				serve(n, c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

// readRequest reads one request and its body from br; false at the end of
// the connection.
func readRequest(t *testing.T, br *bufio.Reader) (*http.Request, bool) {
	t.Helper()
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, false
	}
	if _, err := io.Copy(io.Discard, req.Body); err != nil {
		return nil, false
	}
	return req, true
}

// get sends a GET (a POST with body when body is not empty) through rt and
// returns the response with its body read.
func get(t *testing.T, rt http.RoundTripper, url, body string) (*http.Response, string, error) {
	t.Helper()
	return do(t, context.Background(), rt, url, body)
}

func do(t *testing.T, ctx context.Context, rt http.RoundTripper, url, body string) (*http.Response, string, error) {
	t.Helper()
	method, rd := http.MethodGet, io.Reader(nil)
	if body != "" {
		method, rd = http.MethodPost, strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// trackingDialer dials loopback and keeps the connections it made, so that
// a test can wrap them (failing writes) or wait on them.
type trackingDialer struct {
	mu    sync.Mutex
	conns []*trackedConn
}

func (d *trackingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	nc, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c := &trackedConn{Conn: nc}
	d.mu.Lock()
	d.conns = append(d.conns, c)
	d.mu.Unlock()
	return c, nil
}

func (d *trackingDialer) conn(i int) *trackedConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.conns[i]
}

func (d *trackingDialer) dialled() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns)
}

// trackedConn counts what is read and can fail its writes on demand. It
// hides the socket (no SyscallConn), so the idle check does not see it.
type trackedConn struct {
	net.Conn
	read      atomic.Int64
	failWrite atomic.Bool
	closed    atomic.Bool
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *trackedConn) Write(p []byte) (int, error) {
	if c.failWrite.Load() {
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: io.ErrClosedPipe}
	}
	return c.Conn.Write(p)
}

func (c *trackedConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

// dialFunc adapts a plain dial to DialContext.
func dialFunc(dial func(network, addr string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(_ context.Context, network, addr string) (net.Conn, error) { return dial(network, addr) }
}
