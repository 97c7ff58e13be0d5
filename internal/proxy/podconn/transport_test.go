package podconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestKeepAlive: sequential requests to one pod share one connection, and
// it waits in the pool between them.
func TestKeepAlive(t *testing.T) {
	pod := newCountedPod(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, "echo:"+string(b))
	})
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	for i := range 5 {
		res, body, err := get(t, tr, pod.URL+"/v1/completions", `{"prompt":"x"}`)
		if err != nil || res.StatusCode != 200 || body != `echo:{"prompt":"x"}` {
			t.Fatalf("request %d = %v, %q, %v", i, res, body, err)
		}
		if got := tr.pool.idle(pod.Listener.Addr().String()); got != 1 {
			t.Fatalf("idle after request %d = %d, want 1", i, got)
		}
	}
	if got := pod.conns.Load(); got != 1 {
		t.Errorf("connections = %d, want 1 for 5 sequential requests", got)
	}
}

// TestResponseFraming: every way a response can be framed reads to its
// end, with its trailers, and the connection is reused exactly when the
// framing allows it.
func TestResponseFraming(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		handler  http.HandlerFunc
		body     string
		trailer  string // the X-Usage trailer wanted
		status   int
		wantConn int64 // connections after two requests
	}{
		{name: "content-length", method: "POST", body: "hello", status: 200, wantConn: 1,
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Length", "5")
				_, _ = io.WriteString(w, "hello")
			}},
		{name: "chunked with trailers", method: "POST", body: "data: a\n\ndata: b\n\n", trailer: "7", status: 200, wantConn: 1,
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Trailer", "X-Usage")
				for _, ev := range []string{"data: a\n\n", "data: b\n\n"} {
					_, _ = io.WriteString(w, ev)
					w.(http.Flusher).Flush()
				}
				w.Header().Set("X-Usage", "7")
			}},
		{name: "HEAD", method: "HEAD", status: 200, wantConn: 1,
			handler: func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("Content-Length", "12") }},
		{name: "204", method: "POST", status: 204, wantConn: 1,
			handler: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }},
		{name: "304", method: "GET", status: 304, wantConn: 1,
			handler: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(304) }},
		{name: "connection close", method: "POST", body: "bye", status: 200, wantConn: 2,
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Connection", "close")
				_, _ = io.WriteString(w, "bye")
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := newCountedPod(t, tt.handler)
			tr := &Transport{}
			defer tr.CloseIdleConnections()
			for i := range 2 {
				req, _ := http.NewRequest(tt.method, pod.URL+"/x", strings.NewReader("{}"))
				res, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil || string(b) != tt.body || res.StatusCode != tt.status {
					t.Fatalf("request %d = %d %q, %v; want %d %q", i, res.StatusCode, b, err, tt.status, tt.body)
				}
				if got := res.Trailer.Get("X-Usage"); got != tt.trailer {
					t.Errorf("trailer X-Usage = %q, want %q", got, tt.trailer)
				}
				if res.Request != req {
					t.Errorf("Response.Request is not the request sent")
				}
			}
			if got := pod.conns.Load(); got != tt.wantConn {
				t.Errorf("connections = %d, want %d", got, tt.wantConn)
			}
		})
	}
}

// TestEarlyHintsReachTheTrace: a 103 before the answer goes to the
// request's Got1xxResponse with its headers, and the final response
// follows.
func TestEarlyHintsReachTheTrace(t *testing.T) {
	pod := newCountedPod(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		_, _ = io.WriteString(w, "ok")
	})
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	var got []string
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			got = append(got, http.StatusText(code)+" "+h.Get("Link"))
			return nil
		},
	})
	res, body, err := do(t, ctx, tr, pod.URL, "")
	if err != nil || res.StatusCode != 200 || body != "ok" {
		t.Fatalf("response = %v %q, %v", res, body, err)
	}
	if want := "Early Hints </a.css>; rel=preload"; len(got) != 1 || got[0] != want {
		t.Errorf("1xx seen = %q, want [%q]", got, want)
	}
}

// recordingRT is a Fallback that records what reached it.
type recordingRT struct {
	mu   sync.Mutex
	reqs []*http.Request
	next http.RoundTripper
}

func (r *recordingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	if r.next == nil {
		return nil, errors.New("recorded")
	}
	return r.next.RoundTrip(req)
}

// TestFallback: https pods, upgrades, Expect and CONNECT go to the
// Fallback; without one they are refused.
func TestFallback(t *testing.T) {
	tlsPod := newTLSPod(t)
	plain := newCountedPod(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "plain") })
	tests := []struct {
		name   string
		req    func() *http.Request
		toNext bool // the request reaches Fallback
	}{
		{"https", func() *http.Request { r, _ := http.NewRequest("GET", tlsPod.URL, nil); return r }, true},
		{"upgrade", func() *http.Request {
			r, _ := http.NewRequest("GET", plain.URL, nil)
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", "websocket")
			return r
		}, true},
		{"expect", func() *http.Request {
			r, _ := http.NewRequest("POST", plain.URL, strings.NewReader("{}"))
			r.Header.Set("Expect", "100-continue")
			return r
		}, true},
		{"plain", func() *http.Request { r, _ := http.NewRequest("GET", plain.URL, nil); return r }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb := &recordingRT{next: tlsPod.Client().Transport}
			tr := &Transport{Fallback: fb}
			defer tr.CloseIdleConnections()
			res, err := tr.RoundTrip(tt.req())
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if got := len(fb.reqs) == 1; got != tt.toNext {
				t.Errorf("reached Fallback = %v, want %v", got, tt.toNext)
			}
			if _, err := (&Transport{}).RoundTrip(tt.req()); tt.toNext && err == nil {
				t.Errorf("without a Fallback: no error")
			}
		})
	}
}

func newTLSPod(t *testing.T) *countedPod {
	t.Helper()
	p := &countedPod{Server: httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			t.Error("https pod answered without TLS")
		}
		_, _ = io.WriteString(w, "tls")
	}))}
	p.StartTLS()
	t.Cleanup(p.Close)
	return p
}

// TestCloseIdleConnections: the idle connections close, and the
// Fallback's idle connections with them; the next request dials.
func TestCloseIdleConnections(t *testing.T) {
	pod := newCountedPod(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	fb := &closeCounter{}
	tr := &Transport{Fallback: fb}
	if _, _, err := get(t, tr, pod.URL, ""); err != nil {
		t.Fatal(err)
	}
	key := pod.Listener.Addr().String()
	if got := tr.pool.idle(key); got != 1 {
		t.Fatalf("idle = %d, want 1", got)
	}
	tr.CloseIdleConnections()
	if got := tr.pool.idle(key); got != 0 || fb.closed != 1 {
		t.Fatalf("after CloseIdleConnections: idle = %d, fallback closed %d times; want 0, 1", got, fb.closed)
	}
	if _, _, err := get(t, tr, pod.URL, ""); err != nil {
		t.Fatal(err)
	}
	if got := pod.conns.Load(); got != 2 {
		t.Errorf("connections = %d, want 2", got)
	}
	tr.CloseIdleConnections()
}

// closeCounter is a Fallback that counts CloseIdleConnections.
type closeCounter struct {
	recordingRT
	closed int
}

func (c *closeCounter) CloseIdleConnections() { c.closed++ }

// TestMaxIdlePerHost: of n connections in use at once, MaxIdleConnsPerHost
// stay idle after; the others are closed.
func TestMaxIdlePerHost(t *testing.T) {
	const n, keep = 5, 2
	release := make(chan struct{})
	var arrived sync.WaitGroup
	arrived.Add(n)
	pod := newCountedPod(t, func(w http.ResponseWriter, _ *http.Request) {
		arrived.Done()
		<-release
		_, _ = io.WriteString(w, "ok")
	})
	tr := &Transport{MaxIdleConnsPerHost: keep}
	defer tr.CloseIdleConnections()
	var done sync.WaitGroup
	for range n {
		done.Go(func() {
			if _, body, err := get(t, tr, pod.URL, ""); err != nil || body != "ok" {
				t.Errorf("response %q, %v", body, err)
			}
		})
	}
	arrived.Wait()
	close(release)
	done.Wait()
	if got := tr.pool.idle(pod.Listener.Addr().String()); got != keep {
		t.Errorf("idle = %d, want %d", got, keep)
	}
	if got := pod.conns.Load(); got != n {
		t.Errorf("connections = %d, want %d", got, n)
	}
}

// TestDialOffTheCallersGoroutine: the dialer runs on a goroutine other
// than the caller's (its call chain would otherwise double the stack of a
// stream's goroutine for the stream's life) and gets the request's
// context.
func TestDialOffTheCallersGoroutine(t *testing.T) {
	pod := newCountedPod(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	type key struct{}
	var dialer, dialled atomic.Int64
	var sawCtx atomic.Bool
	tr := &Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialer.Store(goroutineID(t))
		dialled.Add(1)
		sawCtx.Store(ctx.Value(key{}) == "request")
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	ctx := context.WithValue(t.Context(), key{}, "request")
	res, body, err := do(t, ctx, tr, pod.URL+"/v1/models", "")
	if err != nil || res.StatusCode != 200 || body != "ok" {
		t.Fatalf("request = %v, %q, %v", res, body, err)
	}
	if dialled.Load() != 1 {
		t.Fatalf("dials = %d, want 1", dialled.Load())
	}
	if caller := goroutineID(t); dialer.Load() == caller {
		t.Errorf("the dialer ran on the caller's goroutine %d", caller)
	}
	if !sawCtx.Load() {
		t.Error("the dialer did not get the request's context")
	}
}

// goroutineID is the calling goroutine's number, from its stack's header
// line ("goroutine 7 [running]:").
func goroutineID(t *testing.T) int64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	var id int64
	if _, err := fmt.Sscanf(string(buf), "goroutine %d ", &id); err != nil {
		t.Errorf("goroutine header %q: %v", buf, err)
	}
	return id
}
