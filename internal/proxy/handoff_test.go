package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
)

// The tests of this file hold the handoff's own properties. The proxy's
// other stream tests run through it too (newHandler turns it on, as the
// default policy does): TestClientDisconnectCancelsUpstream (a client that
// leaves while the pod is silent, after the handoff), TestPodDiesMidStream
// (a pod that dies after it) and the send-timeout tests.

const streamPrompt = `{"model":"m","prompt":"x","stream":true}`

// eventsPod streams n events, the last with a usage object, then [DONE];
// after the first it waits for release, if set.
func eventsPod(n int, release <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range n {
			if i == 1 && release != nil {
				<-release
			}
			if i == n-1 {
				fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"%d\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":%d}}\n\n", i, n)
			} else {
				fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"%d\"}]}\n\n", i)
			}
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
}

// streamRequest is a stream's request as a client writes it.
var streamRequest = fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
	len(streamPrompt), streamPrompt)

// jsonRequest is a completion's request without a stream.
var jsonRequest = fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
	len(`{"model":"m","prompt":"x"}`), `{"model":"m","prompt":"x"}`)

// streamOrJSONPod streams n events (eventsPod) for a stream, and answers
// JSON otherwise.
func streamOrJSONPod(n int, release <-chan struct{}) http.Handler {
	events := eventsPod(n, release)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == int64(len(streamPrompt)) {
			events.ServeHTTP(w, r)
			return
		}
		okPod().ServeHTTP(w, r)
	})
}

// rawConn is a client connection to tp, written and read by hand.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

// dialRaw connects to tp and writes raw on the connection.
func dialRaw(t *testing.T, tp *testProxy, raw string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", tp.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc := &rawConn{t: t, c: c, br: bufio.NewReader(c)}
	rc.send(raw)
	return rc
}

func (rc *rawConn) send(raw string) {
	rc.t.Helper()
	if _, err := io.WriteString(rc.c, raw); err != nil {
		rc.t.Fatal(err)
	}
}

// answer reads the next answer's head.
func (rc *rawConn) answer() *http.Response {
	rc.t.Helper()
	res, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		rc.t.Fatalf("reading an answer: %v", err)
	}
	return res
}

// keptStream reads the next answer's head, which must be a stream's 200
// on a connection kept for what follows.
func (rc *rawConn) keptStream() *http.Response {
	rc.t.Helper()
	res := rc.answer()
	if res.StatusCode != 200 || res.Close {
		rc.t.Fatalf("stream: %v; want 200 on a kept connection", res)
	}
	return res
}

// streamThenJSON is a stream's request, followed by a completion's when
// pipelined.
func streamThenJSON(pipelined bool) string {
	if pipelined {
		return streamRequest + jsonRequest
	}
	return streamRequest
}

// streamEnds reads a stream's body to its end: an error if its chunked
// body was not ended, and it must end with [DONE].
func streamEnds(t *testing.T, body io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(body)
	if err != nil || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Fatalf("stream: %q, %v; want it whole, ending in [DONE]", b, err)
	}
	return string(b)
}

// endsClosed lets the pod end a stream (release), reads it whole from
// body, and checks that the server then closed the connection and that the
// one request was served.
func endsClosed(t *testing.T, tp *testProxy, rc *rawConn, body io.Reader, release chan struct{}) {
	t.Helper()
	close(release)
	streamEnds(t, body)
	rc.closed()
	tp.close()
	if got := tp.outcomes(t)[decide.OutcomeServed]; got != 1 {
		t.Errorf("served = %v, want 1", got)
	}
}

// closed fails unless the server has closed the connection with nothing
// more sent.
func (rc *rawConn) closed() {
	rc.t.Helper()
	if rest, err := io.ReadAll(rc.br); err != nil || len(rest) != 0 {
		rc.t.Fatalf("after the stream: %q, %v; want the connection closed", rest, err)
	}
}

// TestStreamHandedOff: an HTTP/1.1 stream reaches its client whole and in
// order, its chunked body ended; its connection then goes back to the server
// and takes the client's next request, also when the client sent that
// request before the stream ended (pipelined). The outcomes, the usage and
// the connection's return are recorded once each.
func TestStreamHandedOff(t *testing.T) {
	for _, pipelined := range []bool{false, true} {
		t.Run(fmt.Sprintf("pipelined=%v", pipelined), func(t *testing.T) {
			var ended atomic.Int32
			release := make(chan struct{}) // the rest comes once the first event is out: after the handoff
			tp := newTestProxy(t, streamOrJSONPod(5, release), func(o *testOptions) {
				o.Extra = func(o *Options) { o.HandedOffClosed = func() { ended.Add(1) } }
			})
			rc := dialRaw(t, tp, streamThenJSON(pipelined))
			res := rc.keptStream()
			rd := bufio.NewReader(res.Body)
			first, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("first event %q: %v", first, err)
			}
			close(release)
			body := first + streamEnds(t, rd)
			for i := range 5 {
				if want := fmt.Sprintf(`"text":"%d"`, i); !strings.Contains(body, want) {
					t.Fatalf("event %d missing from %q", i, body)
				}
			}
			if !pipelined {
				rc.send(jsonRequest)
			}
			res = rc.answer()
			if b, _ := io.ReadAll(res.Body); res.StatusCode != 200 || !strings.Contains(string(b), `"choices"`) {
				t.Fatalf("the next request on the connection: %d %q", res.StatusCode, b)
			}
			rc.c.Close()
			tp.close()
			if got := tp.outcomes(t)[decide.OutcomeServed]; got != 2 {
				t.Errorf("served = %v, want 2 (outcomes %v)", got, tp.outcomes(t))
			}
			if got := testutil.ToFloat64(tp.h.metrics.usedTokens.WithLabelValues("pod-0", "completion")); got != 5 {
				t.Errorf("completion tokens = %v, want the pod's 5", got)
			}
			if got := ended.Load(); got != 1 {
				t.Errorf("HandedOffClosed called %d times, want 1", got)
			}
		})
	}
}

// TestHandedOffClosesWhenNoneKeepsIt: a handed-off stream's answer says
// Connection: close, and its connection closes once the stream is whole,
// when no server takes it back (no ReturnConnsTo) or when the client asked
// for the close itself.
func TestHandedOffClosesWhenNoneKeepsIt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		request string
		server  bool
	}{
		{"no server", streamRequest, false},
		{"client said close", strings.Replace(streamRequest, "Host: x\r\n", "Host: x\r\nConnection: close\r\n", 1), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var handedOff atomic.Int32
			release := make(chan struct{})
			tp := newTestProxy(t, eventsPod(3, release), func(o *testOptions) {
				o.Extra = func(o *Options) { o.HandedOffClosed = func() { handedOff.Add(1) } }
			})
			if !tc.server {
				tp.h.ReturnConnsTo(nil)
			}
			rc := dialRaw(t, tp, tc.request)
			res := rc.answer()
			if res.StatusCode != 200 || !res.Close {
				t.Fatalf("stream: %v; want 200 that says Connection: close", res)
			}
			endsClosed(t, tp, rc, res.Body, release)
			if got := handedOff.Load(); got != 1 {
				t.Errorf("HandedOffClosed called %d times, want 1 (the stream handed off)", got)
			}
		})
	}
}

// TestStreamHandoffOff: with StreamHandoff false a stream stays on
// net/http, and its connection is kept for the next request.
func TestStreamHandoffOff(t *testing.T) {
	tp := newTestProxy(t, eventsPod(3, nil), func(o *testOptions) {
		o.Extra = func(o *Options) { o.StreamHandoff = false }
	})
	res := post(t, tp.srv.URL, "/v1/completions", streamPrompt, nil)
	if _, err := io.ReadAll(res.Body); err != nil || res.Close {
		t.Fatalf("stream: %v, close=%v; want it whole on a kept connection", err, res.Close)
	}
	tp.close()
	if got := tp.outcomes(t)[decide.OutcomeServed]; got != 1 {
		t.Errorf("served = %v, want 1", got)
	}
}

// TestTLSStreamsStayOnNetHTTP: over TLS no stream is handed off. HTTP/2
// streams share their connection (and HTTP/2 forbids Connection: close);
// an HTTP/1.1 one would cost its client a new TLS handshake per stream.
func TestTLSStreamsStayOnNetHTTP(t *testing.T) {
	for _, h2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("http2=%v", h2), func(t *testing.T) {
			tp := newTestProxy(t, eventsPod(3, nil), nil)
			srv := httptest.NewUnstartedServer(tp.h)
			srv.EnableHTTP2 = h2
			srv.StartTLS()
			defer srv.Close()
			client := srv.Client()
			defer client.CloseIdleConnections()
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/completions", strings.NewReader(streamPrompt))
			res, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			if err != nil || res.ProtoMajor != map[bool]int{true: 2, false: 1}[h2] || res.Close || res.Header.Get("Connection") != "" {
				t.Fatalf("HTTP/%d, Connection %q (close %v), %v", res.ProtoMajor, res.Header.Get("Connection"), res.Close, err)
			}
			if !strings.Contains(string(body), "[DONE]") {
				t.Fatalf("stream %q not whole", body)
			}
		})
	}
}

// openStream opens a stream through tp and reads its first event.
func openStream(t *testing.T, tp *testProxy) *bufio.Reader {
	t.Helper()
	res := post(t, tp.srv.URL, "/v1/completions", streamPrompt, nil)
	rd := bufio.NewReader(res.Body)
	if first, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(first, "data: ") {
		t.Fatalf("first event %q, %v", first, err)
	}
	return rd
}

// shutdown is cmd/gatekeeper's graceful shutdown (shutdownHTTP): the
// server's, which waits for a connection until its stream is handed off,
// then the handed-off streams', until ctx ends.
func shutdown(tp *testProxy, ctx context.Context) error {
	err := tp.srv.Config.Shutdown(context.Background())
	return errors.Join(err, tp.h.WaitStreams(ctx))
}

// TestWaitStreamsCuts: a handed-off stream still running when shutdown's
// time is up is cut, the client sees it cut short, and its outcome is
// recorded before WaitStreams returns.
func TestWaitStreamsCuts(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	tp := newTestProxy(t, eventsPod(3, release), nil)
	rd := openStream(t, tp) // the pod holds the stream after its first event
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := shutdown(tp, ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("shutdown with its time up = %v, want context.Canceled", err)
	}
	if rest, err := io.ReadAll(rd); err == nil {
		t.Fatalf("cut stream ended cleanly with %q; want an error the client can see", rest)
	}
	if got := tp.outcomes(t)[decide.OutcomeClientClosed]; got != 1 {
		t.Errorf("client_closed = %v, want 1 (outcomes %v)", got, tp.outcomes(t))
	}
}

// TestWaitStreamsWaits: shutdown waits for a handed-off stream that ends in
// its time.
func TestWaitStreamsWaits(t *testing.T) {
	release := make(chan struct{})
	tp := newTestProxy(t, eventsPod(3, release), nil)
	rd := openStream(t, tp)
	waited := make(chan error, 1)
	go func() { waited <- shutdown(tp, context.Background()) }()
	close(release)
	if rest, err := io.ReadAll(rd); err != nil || !strings.HasSuffix(string(rest), "[DONE]\n\n") {
		t.Fatalf("stream: %q, %v", rest, err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("shutdown = %v, want nil", err)
	}
	if got := tp.outcomes(t)[decide.OutcomeServed]; got != 1 {
		t.Errorf("served = %v, want 1 (outcomes %v)", got, tp.outcomes(t))
	}
}

// TestHandoffsCount: what WaitStreams waits for is closed while nothing
// is counted, open while a stream runs or a given-back connection is not
// yet the server's, and a count that starts again from zero (a stream
// handed off while shutdown waits) gets a new one.
func TestHandoffsCount(t *testing.T) {
	var hs handoffs
	isClosed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	if !isClosed(hs.ended()) {
		t.Fatal("nothing counted: ended is open")
	}
	f := new(flight)
	hs.add(f, func() {})
	ended := hs.ended()
	hs.hold() // the stream gives its connection back before it ends
	hs.done(f)
	if isClosed(ended) || len(hs.cut) != 0 {
		t.Fatalf("a connection not yet taken: ended closed %v, %d cuts left", isClosed(ended), len(hs.cut))
	}
	hs.release()
	if !isClosed(ended) {
		t.Fatal("all ended: the waiter's channel is still open")
	}
	hs.add(f, func() {})
	if again := hs.ended(); isClosed(again) {
		t.Fatal("a stream added after the count reached zero: ended is closed")
	}
	hs.done(f)
	if !isClosed(hs.ended()) {
		t.Fatal("that stream ended: ended is open")
	}
}

// TestFrameChunk: a read of any size the buffer takes is framed as one
// chunk in place, and the buffer stays in the allocator's 2 KiB class.
func TestFrameChunk(t *testing.T) {
	if n := len(handoffBuffer{}); n != streamBufferSize {
		t.Fatalf("handoffBuffer is %d bytes, want %d", n, streamBufferSize)
	}
	for _, n := range []int{1, 15, 16, 255, 256, handoffBufferSize} {
		buf := new(handoffBuffer)
		data := strings.Repeat("x", n)
		copy(buf[chunkHeadRoom:], data)
		if got, want := string(frameChunk(buf, n)), fmt.Sprintf("%x\r\n%s\r\n", n, data); got != want {
			t.Errorf("frameChunk(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestNotHandedOff: what net/http does not send chunked stays with it: an
// HTTP/1.0 client's stream (no chunks in HTTP/1.0) and a stream of known
// length. Both reach their client whole, without Connection: close added
// to the second.
func TestNotHandedOff(t *testing.T) {
	release := make(chan struct{})
	close(release)
	sized := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Length", "25")
		fmt.Fprint(w, "data: one\n\ndata: [DONE]\n\n")
	})
	for _, tc := range []struct {
		name  string
		pod   http.Handler
		proto string
		want  string
	}{
		{"http/1.0", eventsPod(3, release), "HTTP/1.0", "data: [DONE]\n\n"},
		{"content-length", sized, "HTTP/1.1", "data: one\n\ndata: [DONE]\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTestProxy(t, tc.pod, nil)
			rc := dialRaw(t, tp, strings.Replace(streamRequest, "HTTP/1.1", tc.proto, 1))
			res := rc.answer()
			body, err := io.ReadAll(res.Body)
			if err != nil || !strings.HasSuffix(string(body), tc.want) || len(res.TransferEncoding) != 0 {
				t.Fatalf("%s: %q %v (transfer encoding %v), want it whole and unchunked", tc.proto, body, err, res.TransferEncoding)
			}
			if tc.proto == "HTTP/1.1" && res.Close {
				t.Error("a stream of known length was answered Connection: close")
			}
			tp.close()
			if got := tp.outcomes(t)[decide.OutcomeServed]; got != 1 {
				t.Errorf("served = %v, want 1 (outcomes %v)", got, tp.outcomes(t))
			}
		})
	}
}

// TestHandedOffDrainingCloses: a stream that starts during the drain says
// Connection: close, as every answer then does, and one that the drain
// overtakes is not served again; either connection closes once its stream
// is whole.
func TestHandedOffDrainingCloses(t *testing.T) {
	for _, before := range []bool{true, false} {
		t.Run(fmt.Sprintf("drain_before_stream=%v", before), func(t *testing.T) {
			release := make(chan struct{})
			tp := newTestProxy(t, eventsPod(3, release), nil)
			if before {
				tp.h.core.StartDrain()
			}
			rc := dialRaw(t, tp, streamRequest)
			res := rc.answer()
			if res.StatusCode != 200 || res.Close != before {
				t.Fatalf("stream: %v; want 200 that says Connection: close = %v", res, before)
			}
			if !before {
				tp.h.core.StartDrain()
			}
			endsClosed(t, tp, rc, res.Body, release)
		})
	}
}

// TestServedAgainKeepsGuard: a connection served again after its stream is
// still under framing.Guard, also when a request was sent before the stream
// ended (so that the server reads it again from what the handoff kept): an
// ambiguous request on it is refused, and the connection closed, as on any
// other.
func TestServedAgainKeepsGuard(t *testing.T) {
	body := `{"model":"m","prompt":"x"}`
	ambiguous := fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	for _, pipelined := range []bool{false, true} {
		t.Run(fmt.Sprintf("pipelined=%v", pipelined), func(t *testing.T) {
			release := make(chan struct{})
			tp := newTestProxy(t, streamOrJSONPod(3, release), nil)
			rc := dialRaw(t, tp, streamThenJSON(pipelined))
			res := rc.keptStream()
			close(release)
			streamEnds(t, res.Body)
			if pipelined {
				res := rc.answer()
				if res.StatusCode != 200 {
					t.Fatalf("the pipelined request: %v", res)
				}
				_, _ = io.Copy(io.Discard, res.Body)
			}
			rc.send(ambiguous)
			res = rc.answer()
			_, _ = io.Copy(io.Discard, res.Body)
			if res.StatusCode != 400 || !res.Close || res.Header.Get("X-Gatekeeper-Reason") != "bad_request" {
				t.Errorf("ambiguous request after a stream = %d (close %v, reason %q), want 400 bad_request, closed",
					res.StatusCode, res.Close, res.Header.Get("X-Gatekeeper-Reason"))
			}
			rc.c.Close()
			tp.close()
		})
	}
}

// TestServedAgainWaitsIdleTimeout: a connection given back after a stream
// waits for the client's next request as long as the server's idle
// timeout, not its (shorter) header timeout, which starts only when that
// request begins, as on any kept connection; and a client that sends more
// streams on it is served each time.
func TestServedAgainWaitsIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	var handedOff atomic.Int32
	release := make(chan struct{}, 1) // one stream's rest at a time, once its first event is out
	tp := newTestProxy(t, streamOrJSONPod(3, release), func(o *testOptions) {
		o.Server = func(s *http.Server) { s.ReadHeaderTimeout, s.IdleTimeout = idle/10, idle }
		o.Extra = func(o *Options) { o.HandedOffClosed = func() { handedOff.Add(1) } }
	})
	rc := dialRaw(t, tp, streamRequest)
	var lastSent time.Time // before the idle timeout's start, which the last stream's end sets
	for i := range 3 {
		if i > 0 {
			lastSent = time.Now()
			rc.send(streamRequest)
		}
		res := rc.keptStream()
		release <- struct{}{}
		streamEnds(t, res.Body)
	}
	rc.closed() // blocks until the server closes the idle connection
	// A deadline never fires early: had the header timeout applied, the
	// connection would have closed a tenth of this after the stream.
	if waited := time.Since(lastSent); waited < idle {
		t.Errorf("the idle connection closed after %v, want the idle timeout, %v", waited, idle)
	}
	rc.c.Close()
	tp.close()
	if got := tp.outcomes(t)[decide.OutcomeServed]; got != 3 {
		t.Errorf("served = %v, want 3", got)
	}
	if got := handedOff.Load(); got != 3 {
		t.Errorf("HandedOffClosed called %d times, want 3 (each stream handed off)", got)
	}
}
