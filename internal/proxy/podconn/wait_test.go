package podconn

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
)

// writesPod is a pipePod that reads one request and answers with writes,
// one Write each (a pipe's Write returns only once the client has read all
// of it, so a test knows what the client's reader holds), then closes done.
func writesPod(t *testing.T, writes ...string) (*Transport, chan struct{}) {
	done := make(chan struct{})
	tr := &Transport{DialContext: pipePod(func(pod net.Conn) {
		defer close(done)
		if _, err := http.ReadRequest(bufio.NewReader(pod)); err != nil {
			t.Errorf("pod: %v", err)
			return
		}
		for _, w := range writes {
			if _, err := io.WriteString(pod, w); err != nil {
				return
			}
		}
	})}
	return tr, done
}

// helloBody sends a stream's request through tr and reads its body's first
// chunk, "hello".
func helloBody(t *testing.T, tr *Transport) (*body, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", "http://pod/v1/completions", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b := res.Body.(*body)
	p := make([]byte, 64)
	if n, err := b.Read(p); err != nil || string(p[:n]) != "hello" {
		t.Fatalf("first read = %q, %v", p[:n], err)
	}
	return b, p
}

// TestWaitPassesChunkEnds: Wait returns once the pod has sent the next
// chunk, not on the CRLF that ends the chunk before it, which a Read can
// leave behind; a Read after it returns the chunk's data.
func TestWaitPassesChunkEnds(t *testing.T) {
	tr, done := writesPod(t,
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello",
		"\r\n",
		"6\r\nworld!\r\n",
		"0\r\n\r\n")
	b, p := helloBody(t, tr)
	b.Wait()
	// Had Wait returned on the CRLF, the pod's next write would still be
	// blocked and the reader would hold those 2 bytes only.
	if got := b.c.br.Buffered(); got < 3 {
		t.Fatalf("after Wait the reader holds %d bytes, want the next chunk's", got)
	}
	if n, err := b.Read(p); err != nil || string(p[:n]) != "world!" {
		t.Fatalf("second read = %q, %v", p[:n], err)
	}
	b.Wait()
	if n, err := b.Read(p); err != io.EOF || n != 0 {
		t.Fatalf("last read = %q, %v; want EOF", p[:n], err)
	}
	b.Wait() // after the end: returns at once
	<-done
}

// resetOnce reads a pipe and reports its end as a reset the first time,
// then as EOF, as a socket reads after a reset.
type resetOnce struct {
	net.Conn
	reset bool
}

func (c *resetOnce) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err == io.EOF && !c.reset {
		c.reset = true
		return n, syscall.ECONNRESET
	}
	return n, err
}

// TestWaitKeepsTheError: an error Wait meets is the one the next Read
// returns, not what the connection says when read again.
func TestWaitKeepsTheError(t *testing.T) {
	tr, done := writesPod(t, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, n, a string) (net.Conn, error) {
		c, err := dial(ctx, n, a)
		return &resetOnce{Conn: c}, err
	}
	b, p := helloBody(t, tr)
	<-done // the pod's end closes as it returns: Wait meets the reset
	b.Wait()
	if _, err := b.Read(p); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after Wait = %v, want the reset", err)
	}
}
