package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
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
	tp.close() // waits for the handler to record its outcome
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

// send_timeout is a progress timeout (issue 35): a client that takes a byte
// of a stream now and then, each within send_timeout, is served to the end
// however long that takes; one that stops taking bytes is cut between
// send_timeout and a quarter more after its last byte, its pod request
// cancelled and its slot freed. Served over in-memory connections as
// cmd/gatekeeper serves (SendListener), on the bubble's clock.
func TestSendTimeoutIsAProgressTimeout(t *testing.T) {
	const timeout = time.Minute
	t.Run("a reader that takes a byte every half timeout is served", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			pod := newStreamPod(4)
			tp, l := newPipeProxy(t, pod, func(o *testOptions) { o.Policy.SendTimeout = timeout })
			c := l.dial(t)
			start := time.Now()
			askStream(t, c)
			tr := &tricklingReader{r: c, gap: timeout / 2}
			res, err := http.ReadResponse(bufio.NewReaderSize(tr, 16), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			synctest.Wait() // as below: the handler and ReverseProxy's flush timer settle first
			close(pod.release)
			body, err := io.ReadAll(res.Body)
			if err != nil || res.StatusCode != http.StatusOK || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
				t.Fatalf("answer %d %q, %v; want the whole stream", res.StatusCode, body, err)
			}
			if d := time.Since(start); d < 100*timeout {
				t.Fatalf("the stream took %v, want a reader slower than 100 send timeouts", d)
			}
			synctest.Wait() // the handler records its outcome
			if o := tp.outcomes(t); o[decide.OutcomeServed] != 1 || o[decide.OutcomeClientTimeout] != 0 {
				t.Errorf("outcomes %v, want one served", o)
			}
		})
	})
	for _, tt := range []struct {
		name   string
		events int
	}{
		// The copy's write fails: the pod's request is cancelled mid-stream.
		{name: "a reader that stops mid-stream is cut after send_timeout", events: 400},
		// The whole answer fits net/http's buffers: its last flush is what
		// the client never takes.
		{name: "a reader that stops before a short answer's end is cut after send_timeout", events: 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				pod := newStreamPod(tt.events)
				tp, l := newPipeProxy(t, pod, func(o *testOptions) { o.Policy.SendTimeout = timeout })
				c := l.dial(t)
				askStream(t, c)
				tr := &tricklingReader{r: c, gap: time.Second}
				if _, err := http.ReadResponse(bufio.NewReaderSize(tr, 16), nil); err != nil {
					t.Fatalf("reading the answer's headers: %v", err)
				}
				// The handler has sent the headers before its copy loop
				// starts; the loop arms ReverseProxy's flush timer, whose
				// goroutine takes the writer's lock. Let both settle before
				// the pod's events come: a copy that holds that lock while
				// the client takes nothing would leave the timer's goroutine
				// waiting on a mutex, which a bubble does not count as
				// durably blocked, and the bubble's clock would stop.
				synctest.Wait()
				close(pod.release)
				// ... and then nothing.
				time.Sleep(time.Until(tr.last.Add(timeout - time.Second)))
				synctest.Wait()
				if o := tp.outcomes(t); o[decide.OutcomeClientTimeout] != 0 || o[decide.OutcomeServed] != 0 || pod.cancelled() {
					t.Fatalf("outcomes %v, pod request cancelled %v, a second before send_timeout: want it still going", o, pod.cancelled())
				}
				time.Sleep(time.Until(tr.last.Add(timeout + timeout/4)))
				synctest.Wait()
				if o := tp.outcomes(t); o[decide.OutcomeClientTimeout] != 1 || !pod.cancelled() {
					t.Fatalf("outcomes %v, pod request cancelled %v, a quarter past send_timeout: want one client_timeout, cancelled",
						o, pod.cancelled())
				}
				if s := tp.adm.TryAcquire(decide.Need{Seqs: 1}, nil); s == nil {
					t.Error("the slot was not freed")
				} else {
					s.Release()
				}
				if got := tp.gate.got(); len(got) != 1 || got[0] != pods.Excluded {
					t.Errorf("breaker results = %v, want [Excluded]", got)
				}
			})
		})
	}
}

// askStream sends a streamed completion request on c.
func askStream(t *testing.T, c net.Conn) {
	t.Helper()
	body := `{"model":"m","prompt":"a","max_tokens":3,"stream":true}`
	if _, err := fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatalf("sending the request: %v", err)
	}
}

// tricklingReader reads a byte at a time, gap after the one before; last is
// when it last took one.
type tricklingReader struct {
	r    io.Reader
	gap  time.Duration
	last time.Time
}

func (tr *tricklingReader) Read(p []byte) (int, error) {
	if !tr.last.IsZero() {
		time.Sleep(time.Until(tr.last.Add(tr.gap)))
	}
	n, err := tr.r.Read(p[:min(len(p), 1)])
	if n > 0 {
		tr.last = time.Now()
	}
	return n, err
}

// streamPod is a pod, as a RoundTripper, that answers an SSE stream of
// events then [DONE], and remembers its request's context. Its body waits
// for release: ReverseProxy flushes the headers from a timer's goroutine
// under a mutex its body writes take too, and a goroutine waiting on a
// mutex would stop the bubble's clock while a slow client reads them.
type streamPod struct {
	events  int
	release chan struct{}
	mu      sync.Mutex
	ctx     context.Context
}

func newStreamPod(events int) *streamPod {
	return &streamPod{events: events, release: make(chan struct{})}
}

// gatedReader reads r once gate is closed, unless ctx ends first.
type gatedReader struct {
	ctx  context.Context
	gate <-chan struct{}
	r    io.Reader
}

func (g gatedReader) Read(p []byte) (int, error) {
	select {
	case <-g.gate:
		return g.r.Read(p)
	case <-g.ctx.Done():
		return 0, g.ctx.Err()
	}
}

func (p *streamPod) RoundTrip(r *http.Request) (*http.Response, error) {
	p.mu.Lock()
	p.ctx = r.Context()
	p.mu.Unlock()
	var b strings.Builder
	for i := range p.events {
		fmt.Fprintf(&b, "data: {\"choices\":[{\"text\":\" %d\"}]}\n\n", i)
	}
	b.WriteString("data: [DONE]\n\n")
	return &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"text/event-stream"}}, ContentLength: -1,
		Body: io.NopCloser(gatedReader{r.Context(), p.release, strings.NewReader(b.String())}), Request: r}, nil
}

// cancelled reports whether the pod's request was cancelled.
func (p *streamPod) cancelled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ctx != nil && p.ctx.Err() != nil
}
