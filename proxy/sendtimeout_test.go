package proxy

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/decide"
	"github.com/gatekeeper-dev/gatekeeper/pods"
)

// A client that stops reading a stream is cut after send_timeout: the pod's
// request is cancelled, the slot is freed, and the outcome is
// client_timeout, not a pod failure (issue 24: 30 clients reading at 1 byte/s
// held a window of 30 indefinitely).
func TestSendTimeoutCutsAStalledReader(t *testing.T) {
	canceled := make(chan struct{})
	chunk := strings.Repeat("x", 32<<10)
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 4096; i++ { // 128 MiB at most: far past every socket buffer
			if _, err := fmt.Fprintf(w, "data: %s\n\n", chunk); err != nil {
				break
			}
			w.(http.Flusher).Flush()
			if r.Context().Err() != nil {
				break
			}
		}
		<-r.Context().Done() // gatekeeper cancels it
		close(canceled)
	})
	tp := newTestProxy(t, pod, func(o *testOptions) { o.Policy.SendTimeout = 200 * time.Millisecond })
	c, err := net.Dial("tcp", tp.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
	body := `{"model":"m","prompt":"a","max_tokens":3,"stream":true}`
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// ... and read nothing.
	select {
	case <-canceled:
	case <-time.After(10 * time.Second): // a generous bound, not a wait for state
		t.Fatal("the pod's request was not cancelled")
	}
	c.Close()
	tp.srv.Close() // waits for the handler to record its outcome
	if got := tp.outcomes(t)[decide.OutcomeClientTimeout]; got != 1 {
		t.Errorf("outcomes %v, want one client_timeout", tp.outcomes(t))
	}
	if s := tp.adm.TryAcquire(decide.Need{Seqs: 1}, nil); s == nil {
		t.Error("the slot was not freed")
	} else {
		s.Release()
	}
	if got := tp.gate.got(); len(got) != 1 || got[0] != pods.Excluded {
		t.Errorf("breaker results = %v, want [Excluded]: a slow client is not the pod's failure", got)
	}
}
