package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

// acceptRecorder is the raw traffic listener, below the connection limit.
// Each Accept that returns a connection sends on accepts how many of the
// connections it returned earlier had been closed by then.
type acceptRecorder struct {
	net.Listener
	closed  atomic.Int64
	accepts chan int64
}

func (l *acceptRecorder) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.accepts <- l.closed.Load()
	return &countedConn{Conn: c, closed: &l.closed}, nil
}

// countedConn counts its Close before it closes: the limit is released
// only after, so an Accept it unblocks sees the count.
type countedConn struct {
	net.Conn
	closed *atomic.Int64
	once   sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.closed.Add(1) })
	return c.Conn.Close()
}

// TestMaxConnections checks server.max_connections on the traffic listener,
// plain and TLS: with a limit of 2 and two connections open, a third one
// completes its TCP handshake but is accepted only after one of the two
// closes, and then served; gatekeeper_client_connections counts the two.
// No sleeps: the order is read from the listener under the limit.
func TestMaxConnections(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "tls"}[useTLS], func(t *testing.T) {
			pod := http.NewServeMux()
			pod.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
			policy := "upstreams: [{name: p, url: '" + newPodServer(t, pod) + "'}]\nserver: {drain_delay: 0s, max_connections: 2"
			var client *tls.Config
			if useTLS {
				dir := t.TempDir()
				certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
				pool := x509.NewCertPool()
				pool.AddCert(writeCert(t, certFile, keyFile, 1))
				client = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
				policy += ", tls: {cert_file: '" + certFile + "', key_file: '" + keyFile + "'}"
			}
			rec, admin := startLimited(t, policy+"}\n")

			open := func() net.Conn {
				t.Helper()
				c, err := net.Dial("tcp", rec.Addr().String()) // the kernel completes it, accepted or not
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				if client != nil {
					return tls.Client(c, client) // handshakes at the first write
				}
				return c
			}
			c1, c2 := open(), open()
			for i, c := range []net.Conn{c1, c2} {
				if code, err := healthz(c); err != nil || code != 200 {
					t.Fatalf("connection %d: /healthz = %d, %v; want 200", i+1, code, err)
				}
				if closed := <-rec.accepts; closed != 0 {
					t.Fatalf("connection %d accepted after %d closes, want 0", i+1, closed)
				}
			}
			if m := fetch(t, admin+"/metrics"); !strings.Contains(m, "\ngatekeeper_client_connections 2\n") {
				t.Errorf("/metrics lacks gatekeeper_client_connections 2 with two connections open")
			}

			c3 := open()
			third := make(chan string, 1)
			go func() {
				code, err := healthz(c3)
				third <- fmt.Sprint(code, err)
			}()
			select {
			case closed := <-rec.accepts:
				t.Fatalf("a third connection was accepted (after %d closes) while two were open", closed)
			case got := <-third:
				t.Fatalf("the third connection was answered (%s) while two were open", got)
			default:
			}
			c1.Close()
			if closed := <-rec.accepts; closed < 1 {
				t.Errorf("third connection accepted after %d closes, want at least 1", closed)
			}
			if got := <-third; got != "200 <nil>" {
				t.Errorf("third connection: /healthz = %s, want 200 <nil>", got)
			}
		})
	}
}

// startLimited runs an app for policy with an acceptRecorder as its traffic
// listener until the test ends; it returns the recorder and the admin URL.
func startLimited(t *testing.T, policy string) (*acceptRecorder, string) {
	t.Helper()
	cfg, err := config.Parse([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	a, err := newApp(cfg, appOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &acceptRecorder{Listener: tl, accepts: make(chan int64, 16)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.serveOn(ctx, rec, al, make(chan os.Signal)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serveOn() = %v", err)
		}
	})
	return rec, "http://" + al.Addr().String()
}

// healthz sends GET /healthz on c (HTTP/1.1) and returns the status.
func healthz(c net.Conn) (int, error) {
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: gatekeeper\r\n\r\n"); err != nil {
		return 0, err
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}
