package podconn

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/pprof"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// These tests run in synctest bubbles over net.Pipe (loopback TCP does not
// work in a bubble): time is the bubble's, deadlines included, and a
// goroutine left blocked at the end fails the test. Each bubble labels its
// goroutines (pprof), and the goroutines they start inherit the label, so
// that ours can be counted apart from the process's others.

// pipePod dials a net.Pipe whose far end serve handles in a goroutine of
// its own (inside the bubble); the end is closed when serve returns.
func pipePod(serve func(c net.Conn)) func(context.Context, string, string) (net.Conn, error) {
	return func(context.Context, string, string) (net.Conn, error) {
		near, far := net.Pipe()
		go func() {
			defer far.Close()
			serve(far)
		}()
		return near, nil
	}
}

// bubble runs f in a synctest bubble with its goroutines labelled.
func bubble(t *testing.T, f func(t *testing.T, goroutines func() int)) {
	synctest.Test(t, func(t *testing.T) {
		label := t.Name()
		pprof.Do(t.Context(), pprof.Labels("podconn-test", label), func(context.Context) {
			f(t, func() int { return labelled(t, label) })
		})
	})
}

// labelled counts the goroutines labelled podconn-test=value.
func labelled(t *testing.T, value string) int {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%q:%q", "podconn-test", value)
	n := 0
	for _, block := range strings.Split(buf.String(), "\n\n") {
		if strings.HasPrefix(block, "goroutine profile:") {
			_, block, _ = strings.Cut(block, "\n")
		}
		if !strings.Contains(block, want) {
			continue
		}
		var c int
		if _, err := fmt.Sscanf(block, "%d @", &c); err != nil {
			t.Fatalf("goroutine profile block %q: %v", block, err)
		}
		n += c
	}
	return n
}

// holdPod reads a request, answers with head (nothing if empty), then
// holds until the connection ends; got is closed once the request is read.
func holdPod(t *testing.T, head string, got chan<- struct{}) func(net.Conn) {
	return func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, ok := readRequest(t, br); !ok {
			return
		}
		if head != "" {
			_, _ = io.WriteString(c, head)
		}
		close(got)
		_, _ = io.Copy(io.Discard, br) // until the transport closes its end
	}
}

// TestResponseHeaderTimeout: a pod that sends no headers is a timeout
// (net.Error) after ResponseHeaderTimeout, and its connection is closed.
func TestResponseHeaderTimeout(t *testing.T) {
	bubble(t, func(t *testing.T, goroutines func() int) {
		got := make(chan struct{})
		tr := &Transport{DialContext: pipePod(holdPod(t, "", got)), ResponseHeaderTimeout: 30 * time.Second}
		start := time.Now()
		_, _, err := get(t, tr, "http://pod:8000/v1/completions", `{}`)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("error = %v, want a timeout", err)
		}
		if waited := time.Since(start); waited != 30*time.Second {
			t.Errorf("waited %v, want 30s", waited)
		}
		synctest.Wait()
		if n := goroutines(); n != 1 {
			t.Errorf("goroutines = %d, want 1 (the test's): the pod saw its connection close", n)
		}
	})
}

// TestCancel: a request whose context ends while it waits for headers, or
// while its body streams, ends with the context's error at once; its
// connection is closed, and no goroutine is left.
func TestCancel(t *testing.T) {
	for _, tt := range []struct {
		name string
		head string // what the pod sends before it holds
	}{
		{"mid-headers", ""},
		{"mid-body", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata: \r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bubble(t, func(t *testing.T, goroutines func() int) {
				got := make(chan struct{})
				tr := &Transport{DialContext: pipePod(holdPod(t, tt.head, got))}
				ctx, cancel := context.WithCancel(t.Context())
				errc := make(chan error, 1)
				go func() {
					req, _ := http.NewRequestWithContext(ctx, "POST", "http://pod:8000/", strings.NewReader("{}"))
					res, err := tr.RoundTrip(req)
					if err == nil {
						var b [6]byte
						if _, err = io.ReadFull(res.Body, b[:]); err == nil {
							_, err = res.Body.Read(b[:]) // holds until cancelled
						}
						res.Body.Close()
					}
					errc <- err
				}()
				<-got
				synctest.Wait()
				if n := goroutines(); n != 3 {
					t.Errorf("goroutines during the exchange = %d, want 3 (test, caller, pod): none of the transport's", n)
				}
				cancel()
				if err := <-errc; !errors.Is(err, context.Canceled) {
					t.Errorf("error = %v, want context.Canceled", err)
				}
				synctest.Wait()
				if n := goroutines(); n != 1 {
					t.Errorf("goroutines after = %d, want 1", n)
				}
			})
		})
	}
}

// TestCloseUnblocksRead: Close while a Read is blocked ends the Read with
// an error and closes the connection.
func TestCloseUnblocksRead(t *testing.T) {
	bubble(t, func(t *testing.T, goroutines func() int) {
		got := make(chan struct{})
		tr := &Transport{DialContext: pipePod(holdPod(t, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", got))}
		req, _ := http.NewRequest("GET", "http://pod:8000/", nil)
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := res.Body.Read(make([]byte, 10))
			errc <- err
		}()
		synctest.Wait() // the Read is blocked
		res.Body.Close()
		if err := <-errc; err == nil || err == io.EOF {
			t.Errorf("blocked Read after Close = %v, want an error", err)
		}
		if _, err := res.Body.Read(make([]byte, 1)); !errors.Is(err, errClosedBody) {
			t.Errorf("Read after Close = %v, want errClosedBody", err)
		}
		synctest.Wait()
		if n := goroutines(); n != 1 {
			t.Errorf("goroutines = %d, want 1: the pod saw the connection close", n)
		}
	})
}
