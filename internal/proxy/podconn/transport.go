package podconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Defaults of the Transport's zero fields.
const (
	// DefaultMaxIdleConnsPerHost is net/http's.
	DefaultMaxIdleConnsPerHost = 2
	// DefaultMaxResponseHeaderBytes bounds a response's headers (see the
	// package doc).
	DefaultMaxResponseHeaderBytes = 64 << 10
)

// Transport is an http.RoundTripper to plain-HTTP pods; see the package
// doc. Set its fields before its first use and do not change them after.
// It is safe for concurrent use and must not be copied.
type Transport struct {
	// DialContext opens a connection to a pod; nil means a net.Dialer's
	// with a 30 s timeout and 30 s keep-alives. Its errors reach the caller
	// as they are.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// ResponseHeaderTimeout bounds the wait for a response's headers once
	// the request is written; 0: no bound.
	ResponseHeaderTimeout time.Duration
	// IdleConnTimeout closes a connection that was idle this long; 0: never.
	IdleConnTimeout time.Duration
	// MaxIdleConnsPerHost bounds the idle connections kept per host; 0
	// means DefaultMaxIdleConnsPerHost.
	MaxIdleConnsPerHost int
	// MaxResponseHeaderBytes bounds what a response's headers (its 1xx
	// responses' included, until a handed-over 1xx resets it) may read
	// from the connection; 0 means DefaultMaxResponseHeaderBytes.
	MaxResponseHeaderBytes int64
	// Fallback carries the requests this transport does not (see the
	// package doc); nil refuses them with an error.
	Fallback http.RoundTripper

	pool pool
}

var defaultDialer = &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}

// RoundTrip implements http.RoundTripper. It closes the request's body,
// as a RoundTripper must, errors included.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !handles(req) {
		if t.Fallback == nil {
			closeBody(req)
			return nil, fmt.Errorf("podconn: %s %s: no fallback transport for it", req.Method, req.URL.Redacted())
		}
		return t.Fallback.RoundTrip(req)
	}
	if err := checkRequest(req); err != nil {
		closeBody(req)
		return nil, err
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		closeBody(req)
		return nil, err
	}
	key := hostPort(req)
	c, err := t.conn(ctx, key)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	resp, st, err := c.exchange(req)
	if err == nil || !c.reused || !retryable(req, st) || ctx.Err() != nil {
		return resp, err
	}
	again, rerr := rewind(req)
	if rerr != nil {
		return nil, err
	}
	if c, err = t.dial(ctx, key); err != nil {
		closeBody(again)
		return nil, err
	}
	resp, _, err = c.exchange(again)
	if resp != nil {
		resp.Request = req
	}
	return resp, err
}

// SendsBodyFirst reports whether RoundTrip writes req whole, body
// included, before it reads the response, and so reads req's body no more
// once it has returned a response: true for the requests t carries itself
// (a rewound body comes from GetBody, read before RoundTrip returns too),
// false for those it hands to Fallback (http.Transport writes a request on
// a goroutine of its own, and may still be writing its body when the
// response comes).
func (t *Transport) SendsBodyFirst(req *http.Request) bool { return handles(req) }

// CloseIdleConnections closes the idle connections, and the Fallback's.
// Connections in use are not interrupted.
func (t *Transport) CloseIdleConnections() {
	t.pool.closeAll()
	if f, ok := t.Fallback.(interface{ CloseIdleConnections() }); ok {
		f.CloseIdleConnections()
	}
}

// conn is an idle connection to key that is still open, or a new one.
func (t *Transport) conn(ctx context.Context, key string) (*conn, error) {
	for {
		c := t.pool.take(key, t.IdleConnTimeout)
		if c == nil {
			return t.dial(ctx, key)
		}
		if c.idleAlive() {
			c.reused = true
			c.br = newReader(c)
			return c, nil
		}
		c.close()
	}
}

// dial opens a connection on a goroutine of its own and waits for it. The
// dialer's call chain (address resolution, socket setup) is deep: run on
// the caller's goroutine, under ReverseProxy, it doubled that goroutine's
// stack to 16 KiB, and a goroutine's stack shrinks only while a quarter of
// it is in use, so every stream that dialled kept the doubled stack for
// its whole life. The dialer's own goroutine ends with the dial. The
// dialer honours ctx, so the caller waits for it whole: a connection it
// made is never lost.
func (t *Transport) dial(ctx context.Context, key string) (*conn, error) {
	dial := t.DialContext
	if dial == nil {
		dial = defaultDialer.DialContext
	}
	done := make(chan dialled, 1)
	go func() {
		nc, err := dial(ctx, "tcp", key)
		done <- dialled{nc, err}
	}()
	d := <-done
	if d.err != nil {
		return nil, d.err
	}
	return newConn(t, d.nc, key), nil
}

// dialled is a dial's outcome.
type dialled struct {
	nc  net.Conn
	err error
}

// put takes c back after an exchange that left it reusable.
func (t *Transport) put(c *conn) {
	limit := t.MaxIdleConnsPerHost
	if limit <= 0 {
		limit = DefaultMaxIdleConnsPerHost
	}
	c.releaseReader()
	if !t.pool.put(c, limit, t.IdleConnTimeout) {
		c.close()
	}
}

func (t *Transport) maxHeaderBytes() int64 {
	if t.MaxResponseHeaderBytes > 0 {
		return t.MaxResponseHeaderBytes
	}
	return DefaultMaxResponseHeaderBytes
}

// handles reports whether req is one this transport carries itself.
func handles(req *http.Request) bool {
	if req.URL == nil || req.URL.Scheme != "http" || req.Method == http.MethodConnect {
		return false
	}
	return len(req.Header["Upgrade"]) == 0 && len(req.Header["Expect"]) == 0
}

// hostPort is the pool's key for req: its URL's host with the port.
func hostPort(req *http.Request) string {
	if req.URL.Port() != "" {
		return req.URL.Host
	}
	return net.JoinHostPort(req.URL.Hostname(), "80")
}

var errNoHost = errors.New("podconn: request URL has no host")

// checkRequest refuses what http.Transport refuses before writing, with
// its checks (httpguts): no host, header fields that are not valid HTTP
// (the value is left out of the error: it may be a secret).
func checkRequest(req *http.Request) error {
	if req.URL.Host == "" {
		return errNoHost
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("podconn: invalid header field name %q", k)
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("podconn: invalid header field value for %q", k)
			}
		}
	}
	return nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
