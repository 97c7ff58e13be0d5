package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/proxy/framing"
)

// A write on a SendListener's connection fails only when its reader took no
// byte for the send timeout (issue 35): a reader that takes a byte now and
// then is served however slowly, one that stops is cut between one timeout
// and one and a quarter after its last byte. The pipe hands over a byte per
// read, so each read is progress the writer sees (over TCP it sees the
// reader's window open).
func TestSendConnProgress(t *testing.T) {
	const timeout = time.Minute
	tests := []struct {
		name     string
		timeout  time.Duration
		deadline time.Duration // a deadline set through SetWriteDeadline, from the write's start; 0: none
		wait     time.Duration // before the reader's first byte
		gap      time.Duration // between two bytes it takes
		takes    int           // bytes the reader takes before it stops; -1: all
		wantN    int
		// wantCut is when the write fails, after the reader's last byte (or
		// the write's start when it took none); zero: it does not.
		wantCut [2]time.Duration
	}{
		{name: "a byte every half timeout is never cut", timeout: timeout, gap: timeout / 2, takes: -1, wantN: 64},
		{name: "a byte every timeout less a second is never cut", timeout: timeout, gap: timeout - time.Second, takes: -1, wantN: 64},
		{name: "a first byte late by a timeout less a second", timeout: timeout, wait: timeout - time.Second, gap: time.Second, takes: -1, wantN: 64},
		{name: "a reader that stops is cut after the timeout", timeout: timeout, gap: timeout / 3, takes: 10, wantN: 10,
			wantCut: [2]time.Duration{timeout, timeout + timeout/4}},
		{name: "a reader that never reads is cut at the timeout", timeout: timeout, takes: 0, wantN: 0,
			wantCut: [2]time.Duration{timeout, timeout}},
		{name: "no timeout: the write waits for the reader", wait: 10 * timeout, gap: time.Second, takes: -1, wantN: 64},
		{name: "a deadline set through SetWriteDeadline still ends it", timeout: timeout, deadline: 3*timeout/8 + timeout/16,
			gap: timeout / 8, takes: -1, wantN: 4, wantCut: [2]time.Duration{timeout / 16, timeout / 16}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				client, server := net.Pipe()
				defer client.Close()
				sc := &sendConn{Conn: server}
				defer sc.Close()
				sc.setTimeout(tt.timeout)
				start := time.Now()
				if tt.deadline > 0 {
					if err := sc.SetWriteDeadline(start.Add(tt.deadline)); err != nil {
						t.Fatal(err)
					}
				}
				last := make(chan time.Time, 1) // when the reader took its last byte
				go func() {
					at := start
					defer func() { last <- at }()
					time.Sleep(tt.wait)
					b := make([]byte, 1)
					for i := 0; tt.takes < 0 || i < tt.takes; i++ {
						if i > 0 {
							time.Sleep(tt.gap)
						}
						if _, err := client.Read(b); err != nil {
							return
						}
						at = time.Now()
					}
				}()
				n, err := sc.Write(bytes.Repeat([]byte("x"), 64))
				end := time.Now()
				client.Close()
				from := <-last
				if n != tt.wantN {
					t.Errorf("Write() wrote %d bytes, want %d", n, tt.wantN)
				}
				if tt.wantCut == [2]time.Duration{} {
					if err != nil {
						t.Errorf("Write() = %v after %v, want no error", err, end.Sub(start))
					}
					return
				}
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Errorf("Write() = %v, want a deadline error", err)
				}
				if d := end.Sub(from); d < tt.wantCut[0] || d > tt.wantCut[1] {
					t.Errorf("Write() failed %v after the last byte taken, want within %v", d, tt.wantCut)
				}
			})
		})
	}
}

// A send timeout turned off (a reload) leaves no deadline of its own
// behind, and one set through SetWriteDeadline is kept.
func TestSendConnTimeoutOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, server := net.Pipe()
		defer client.Close()
		sc := &sendConn{Conn: server}
		defer sc.Close()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		sc.setTimeout(time.Second)
		if _, err := sc.Write([]byte("a")); err != nil {
			t.Fatalf("Write() = %v", err)
		}
		sc.setTimeout(0)
		time.Sleep(time.Hour) // past every deadline the timed write set
		if _, err := sc.Write([]byte("b")); err != nil {
			t.Fatalf("Write() after the timeout went off = %v, want nil", err)
		}
		if err := sc.SetWriteDeadline(time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := sc.Write([]byte("c")); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("Write() past SetWriteDeadline = %v, want a deadline error", err)
		}
	})
}

// deadlineCounter counts the write deadlines set on its connection.
type deadlineCounter struct {
	net.Conn
	set int
}

func (c *deadlineCounter) SetWriteDeadline(t time.Time) error {
	c.set++
	return c.Conn.SetWriteDeadline(t)
}

// A stream's writes, one per event, move the connection's write deadline
// once per half step, not once per write; and a reader that stops after
// them is still cut between one timeout and one and a quarter after its
// last byte.
func TestSendConnArmsPerStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = time.Minute
		client, server := net.Pipe()
		defer client.Close()
		counted := &deadlineCounter{Conn: server}
		sc := &sendConn{Conn: counted}
		defer sc.Close()
		sc.setTimeout(timeout)
		const events = 40
		read := make(chan struct{})
		go func() { // takes each event, then stops reading
			b := make([]byte, 1)
			for range events {
				if _, err := client.Read(b); err != nil {
					return
				}
			}
			close(read)
		}()
		for range events {
			if _, err := sc.Write([]byte("e")); err != nil {
				t.Fatalf("Write() = %v", err)
			}
			time.Sleep(time.Second)
		}
		<-read
		// The step is 15 s, re-armed once less than 7.5 s of it is left:
		// at 0, 8, 16, 24 and 32 s.
		if counted.set != 5 {
			t.Errorf("%d writes set the write deadline %d times, want 5", events, counted.set)
		}
		last := time.Now().Add(-time.Second) // the reader took the last event at once
		_, err := sc.Write([]byte("x"))
		if d := time.Since(last); !errors.Is(err, os.ErrDeadlineExceeded) || d < timeout || d > timeout+timeout/4 {
			t.Errorf("Write() to a reader that stopped = %v after %v, want a deadline error within [%v, %v]",
				err, d, timeout, timeout+timeout/4)
		}
	})
}

// ConnContext finds a SendListener's connection under framing.Guard's and
// under TLS, for HTTP/1 requests only (an HTTP/2 connection carries many
// streams).
func TestConnContextFindsTheConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pl := newPipeListener()
		defer pl.Close()
		accept := func(l net.Listener) net.Conn {
			t.Helper()
			client, server := net.Pipe()
			t.Cleanup(func() { client.Close(); server.Close() })
			go func() { pl.conns <- server }()
			c, err := l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		sc := accept(SendListener(pl))
		guarded := accept(framing.Guard(SendListener(pl)))
		tests := []struct {
			name  string
			conn  net.Conn
			proto int
			found bool
		}{
			{name: "the connection itself", conn: sc, proto: 1, found: true},
			{name: "under framing.Guard", conn: guarded, proto: 1, found: true},
			{name: "under TLS", conn: tls.Server(sc, &tls.Config{}), proto: 1, found: true},
			{name: "an HTTP/2 request", conn: tls.Server(sc, &tls.Config{}), proto: 2},
			{name: "not from a SendListener", conn: accept(pl), proto: 1},
		}
		for _, tt := range tests {
			r := (&http.Request{ProtoMajor: tt.proto}).WithContext(ConnContext(context.Background(), tt.conn))
			if got := sendConnFor(r); (got != nil) != tt.found {
				t.Errorf("%s: sendConnFor() = %v, want found %v", tt.name, got, tt.found)
			}
		}
	})
}

// A sendConn is used from several goroutines at once (net/http writes while
// the handler sets the timeout; crypto/tls sets deadlines): go test -race.
func TestSendConnConcurrentUse(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	sc := &sendConn{Conn: server}
	defer sc.Close()
	go func() { _, _ = io.Copy(io.Discard, client) }()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 200 {
				switch (i + j) % 3 {
				case 0:
					sc.setTimeout(time.Duration(j%2) * time.Hour)
				case 1:
					_ = sc.SetWriteDeadline(time.Time{})
				default:
					_ = sc.SetDeadline(time.Now().Add(time.Hour))
				}
			}
		})
	}
	for range 1000 {
		if _, err := sc.Write([]byte("x")); err != nil {
			t.Fatalf("Write() = %v", err)
		}
	}
	wg.Wait()
}
