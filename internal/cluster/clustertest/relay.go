package clustertest

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Relay is a TCP relay on a loopback port in front of an address: a test
// points one replica at it and stalls it to cut that replica off from
// Redis while the others still reach it. Stalled, it keeps every
// connection open and moves no byte either way, as a network partition
// does; Resume lets the bytes held meanwhile flow again.
type Relay struct {
	l      net.Listener
	target string

	mu      sync.Mutex
	stalled bool
	resumed chan struct{} // closed by Resume; replaced by Stall
	held    chan struct{} // closed when a stalled relay first holds a client's bytes; replaced by Stall
	isHeld  bool          // held is closed
	conns   []net.Conn
	wg      sync.WaitGroup
}

// StartRelay relays a loopback port to target until tb's cleanup.
func StartRelay(tb testing.TB, target string) *Relay {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("relay: listen: %v", err)
	}
	r := &Relay{l: l, target: target, resumed: make(chan struct{}), held: make(chan struct{})}
	close(r.resumed)
	r.wg.Go(r.accept)
	tb.Cleanup(r.close)
	return r
}

// URL is the relay's redis:// URL, database 0.
func (r *Relay) URL() string { return "redis://" + r.l.Addr().String() + "/0" }

// Stall stops every byte, on open connections and new ones.
func (r *Relay) Stall() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stalled {
		r.stalled, r.resumed = true, make(chan struct{})
		r.held, r.isHeld = make(chan struct{}), false
	}
}

// Held returns a channel closed once the relay, stalled since the last
// Stall, holds bytes a client sent: a call made meanwhile has left the
// client and waits for its answer.
func (r *Relay) Held() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held
}

// Resume lets bytes flow again.
func (r *Relay) Resume() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stalled {
		r.stalled = false
		close(r.resumed)
	}
}

// gate returns a channel closed while bytes may flow. fromClient says the
// caller holds a client's bytes: a stalled relay reports it on Held.
func (r *Relay) gate(fromClient bool) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stalled && fromClient && !r.isHeld {
		r.isHeld = true
		close(r.held)
	}
	return r.resumed
}

func (r *Relay) accept() {
	for {
		c, err := r.l.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", r.target, time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, c, up)
		r.mu.Unlock()
		r.wg.Go(func() { r.pipe(up, c, true) })
		r.wg.Go(func() { r.pipe(c, up, false) })
	}
}

// pipe copies src to dst, a read at a time, each write waiting while the
// relay is stalled. fromClient says src is the client.
func (r *Relay) pipe(dst, src net.Conn, fromClient bool) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-r.gate(fromClient)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF or closed: the other side closes too
			return
		}
	}
}

func (r *Relay) close() {
	_ = r.l.Close()
	r.Resume()
	r.mu.Lock()
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
