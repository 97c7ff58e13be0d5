package epp

import (
	"bytes"
	"runtime"
	"strconv"
	"testing"
	"testing/synctest"
)

// TestOneGoroutinePerHeldStream: a stream the picker holds (its pick and
// the body's echo sent, its response yet to come) costs the server one
// goroutine, the one gRPC runs Process on; the exchange starts none of its
// own. Counted in a synctest bubble once every goroutine in it is blocked,
// so that nothing outside the test is counted: the server's goroutines are
// those running or started by gRPC's server side or this package's Server.
func TestOneGoroutinePerHeldStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, newFakeDecider(), Options{})
		hold := func(n int) {
			for range n {
				e := h.open()
				e.send(reqHeaders(false, "content-type", "application/json"), reqBody(chatBody, true))
				e.pick(strconv.Itoa(len(chatBody)))
				e.body(requestSide, len(chatBody), true)
			}
			synctest.Wait()
		}
		hold(1) // the connection's own goroutines start with its first stream
		base, process := serverGoroutines(t)
		if process != 1 {
			t.Fatalf("%d goroutines in Process with one stream held, want 1", process)
		}
		const more = 50
		hold(more)
		all, process := serverGoroutines(t)
		if process != 1+more || all-base != more {
			t.Fatalf("%d more streams held: %d more server goroutines, %d in Process; want %d and %d",
				more, all-base, process, more, 1+more)
		}
	})
}

// serverGoroutines counts the goroutines of the caller's synctest bubble
// that belong to a gRPC server (their stack or creator is gRPC's server
// side or this package's Server), and those of them in Server.Process.
func serverGoroutines(t *testing.T) (all, process int) {
	t.Helper()
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var mine []byte
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		header, _, _ := bytes.Cut(g, []byte("\n"))
		if bytes.Contains(header, []byte("[running")) {
			mine = header[bytes.Index(header, []byte("synctest bubble")):]
			break
		}
	}
	if mine == nil {
		t.Fatal("not in a synctest bubble")
	}
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		header, _, _ := bytes.Cut(g, []byte("\n"))
		if !bytes.Contains(header, mine[:len(mine)-1]) { // "synctest bubble N" without its "]:"
			continue
		}
		if bytes.Contains(g, []byte("epp.(*Server).Process(")) {
			process++
		}
		for _, s := range []string{"grpc.(*Server)", "http2Server", "NewServerTransport", "epp.(*Server)"} {
			if bytes.Contains(g, []byte(s)) {
				all++
				break
			}
		}
	}
	return all, process
}
