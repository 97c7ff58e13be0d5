package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/proxy/podconn"
	"github.com/prometheus/client_golang/prometheus"
)

// bigStream is a streamed completion with a 4 KiB prompt (bench/run's
// -prompt-bytes 4096).
var bigStream = `{"model":"m","prompt":"` + strings.Repeat("x", 4<<10) + `","max_tokens":16,"stream":true}`

// bodyWatch is the Handler's own transport (podconn, which says it is done
// with a body once RoundTrip returns) that arranges for freed to close
// once the body the Handler holds for the first request it forwards is
// unreachable.
type bodyWatch struct {
	*podconn.Transport
	freed chan struct{}
	once  sync.Once
}

func (w *bodyWatch) RoundTrip(req *http.Request) (*http.Response, error) {
	if f := flightFrom(req.Context()); f != nil && len(f.body.held) > 0 {
		w.once.Do(func() {
			runtime.AddCleanup(&f.body.held[0], func(freed chan struct{}) { close(freed) }, w.freed)
		})
	}
	return w.Transport.RoundTrip(req)
}

// collected reports whether freed closes within a few collections (a
// cleanup runs on a goroutine of its own once a collection has found its
// object unreachable).
func collected(freed <-chan struct{}) bool {
	for range 20 {
		runtime.GC()
		select {
		case <-freed:
			return true
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}

// TestOpenStreamDoesNotHoldItsBody: once the pod's answer is accepted, the
// request body is unreachable while the stream is still open (issue 38:
// memory per open stream), and the stream goes on to its end.
func TestOpenStreamDoesNotHoldItsBody(t *testing.T) {
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, _ := io.ReadAll(r.Body); string(b) != bigStream {
			t.Errorf("the pod got %d bytes, want the %d sent", len(b), len(bigStream))
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
		w.(http.Flusher).Flush()
		<-hold
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
	watch := &bodyWatch{Transport: NewTransport(TransportSettings{}), freed: make(chan struct{})}
	tp := newTestProxy(t, pod, func(o *testOptions) { o.RoundTripper = watch })
	t.Cleanup(release) // before the servers close: they wait for the pod's handler
	res := post(t, tp.srv.URL, "/v1/completions", bigStream, nil)
	rd := bufio.NewReader(res.Body)
	if first, err := rd.ReadString('\n'); res.StatusCode != 200 || err != nil || !strings.HasPrefix(first, "data: ") {
		t.Fatalf("answer %d, first event %q, %v", res.StatusCode, first, err)
	}
	if !collected(watch.freed) {
		t.Fatal("the request body is still reachable while its stream is open")
	}
	release()
	if rest, err := io.ReadAll(rd); err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("rest of the stream = %q, %v", rest, err)
	}
}

// senderFunc is a RoundTripper that says (SendsBodyFirst) it is done with a
// body once it returns, or does not say.
type senderFunc struct {
	roundTripFunc
	first bool
}

func (s senderFunc) SendsBodyFirst(*http.Request) bool { return s.first }

// TestAcceptDropsTheBody: until the answer is accepted, GetBody rewinds the
// whole body (a transport's retry of a request none of which was written);
// once it is accepted, the exchange holds no body, GetBody fails loudly,
// and the reader the pod's request was written from is emptied when the
// transport said it is done with it, and left to it otherwise.
func TestAcceptDropsTheBody(t *testing.T) {
	for _, tt := range []struct {
		name    string
		rt      func(roundTripFunc) http.RoundTripper
		emptied bool
	}{
		{name: "a transport done with the body", rt: func(f roundTripFunc) http.RoundTripper { return senderFunc{f, true} }, emptied: true},
		{name: "one that may still write it", rt: func(f roundTripFunc) http.RoundTripper { return senderFunc{f, false} }},
		{name: "one that does not say", rt: func(f roundTripFunc) http.RoundTripper { return f }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sent := make(chan *http.Request, 1)
			pr, pw := io.Pipe()
			defer pw.Close()
			rt := tt.rt(func(req *http.Request) (*http.Response, error) {
				b, err := io.ReadAll(req.Body)
				rc, gerr := req.GetBody()
				if err != nil || gerr != nil || string(b) != bigStream {
					t.Errorf("the pod's request: %d bytes, %v, GetBody %v", len(b), err, gerr)
				} else if again, _ := io.ReadAll(rc); string(again) != bigStream {
					t.Errorf("GetBody before the answer: %d bytes, want the %d sent", len(again), len(bigStream))
				}
				sent <- req
				return &http.Response{StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, ContentLength: -1,
					Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: pr, Request: req}, nil
			})
			tp := newTestProxy(t, http.NotFoundHandler(), func(o *testOptions) { o.RoundTripper = rt })
			res := post(t, tp.srv.URL, "/v1/completions", bigStream, nil)
			req := <-sent
			// The Handler reads the event after it accepted the answer, and
			// Write returns once it has: what follows sees the release.
			if _, err := io.WriteString(pw, "data: {}\n\n"); err != nil || res.StatusCode != 200 {
				t.Fatalf("answer %d, event %v", res.StatusCode, err)
			}
			f := flightFrom(req.Context())
			if f.ex.body != nil || f.body.held != nil {
				t.Errorf("the exchange holds %d bytes, the flight %d; want none", len(f.ex.body), len(f.body.held))
			}
			if _, err := req.GetBody(); !errors.Is(err, errBodyReleased) {
				t.Errorf("GetBody once the answer is accepted: %v, want errBodyReleased", err)
			}
			want := int64(len(bigStream))
			if tt.emptied {
				want = 0
			}
			if got := f.body.rd.Size(); got != want {
				t.Errorf("the pod request's reader holds %d bytes, want %d", got, want)
			}
		})
	}
}

// TestRetryCarriesTheWholeBody: a request that the first pod refused (its
// own 503), or that could not reach it, reaches the second pod with every
// byte of its body.
func TestRetryCarriesTheWholeBody(t *testing.T) {
	for _, tt := range []struct{ name, first string }{
		{name: "the pod's own 503", first: "refuses"},
		{name: "a connection that could not be opened", first: "dead"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			got := map[string]string{}
			pod := func(name string, status int) *url.URL {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					b, _ := io.ReadAll(r.Body)
					mu.Lock()
					got[name] = string(b)
					mu.Unlock()
					w.Header().Set("Content-Type", "text/event-stream")
					w.WriteHeader(status)
					_, _ = io.WriteString(w, "data: [DONE]\n\n")
				}))
				t.Cleanup(srv.Close)
				u, _ := url.Parse(srv.URL)
				return u
			}
			first := pod("pod-0", http.StatusServiceUnavailable)
			if tt.first == "dead" {
				first = deadURL(t)
			}
			h, err := newHandler(testOptions{
				Upstreams: []pods.Pod{{Name: "pod-0", URL: first}, {Name: "pod-1", URL: pod("pod-1", 200)}},
				Admission: newFakeAdmission(8, "pod-0", "pod-1"), Metrics: NewMetrics(prometheus.NewRegistry()),
			})
			if err != nil {
				t.Fatal(err)
			}
			gk := httptest.NewServer(h)
			t.Cleanup(gk.Close)
			res := post(t, gk.URL, "/v1/completions", bigStream, nil)
			if b, err := io.ReadAll(res.Body); res.StatusCode != 200 || err != nil || string(b) != "data: [DONE]\n\n" {
				t.Fatalf("answer %d %q, %v; want the second pod's 200", res.StatusCode, b, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if got["pod-1"] != bigStream {
				t.Errorf("the second pod got %d bytes, want the %d sent", len(got["pod-1"]), len(bigStream))
			}
			if tt.first == "refuses" && got["pod-0"] != bigStream {
				t.Errorf("the first pod got %d bytes, want the %d sent", len(got["pod-0"]), len(bigStream))
			}
		})
	}
}

// deadURL is the URL of a loopback port nothing listens on.
func deadURL(t *testing.T) *url.URL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("http://" + ln.Addr().String())
	ln.Close()
	return u
}
