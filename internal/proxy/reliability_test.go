package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
)

// TestPodDiesMidStream: the pod sends one event and its process dies (the
// connection closes without the chunked terminator). The client sees the
// event, then the stream ends with an error, never a hang; the outcome is
// upstream_error and the pod's error breaker hears a failure.
func TestPodDiesMidStream(t *testing.T) {
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close() // the engine process is gone
	})
	tp := newTestProxy(t, pod, nil)
	res := post(t, tp.srv.URL, "/v1/completions", `{"model":"m","prompt":"x","stream":true}`, nil)
	if res.StatusCode != 200 {
		t.Fatalf("status = %d, want the pod's 200", res.StatusCode)
	}
	rd := bufio.NewReader(res.Body)
	first, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "data: ") {
		t.Fatalf("first event = %q, %v", first, err)
	}
	rest, err := io.ReadAll(rd)
	if err == nil {
		t.Fatalf("stream ended cleanly with %q; want an error the client can see", rest)
	}
	if strings.Contains(string(rest), "[DONE]") {
		t.Errorf("stream claimed completion: %q", rest)
	}
	tp.close()
	if got := tp.outcomes(t)[decide.OutcomeUpstreamError]; got != 1 {
		t.Errorf("upstream_error = %v, want 1 (outcomes %v)", got, tp.outcomes(t))
	}
	if got := tp.gate.got(); len(got) != 1 || got[0] != pods.Failure {
		t.Errorf("breaker results = %v, want [Failure]", got)
	}
}

// TestPodHangsBeforeHeaders: a pod that accepts the request and never
// answers gets the client a 504 once transport.response_header_timeout
// passes; the pod hears a cancellation and its breaker a failure.
func TestPodHangsBeforeHeaders(t *testing.T) {
	release := make(chan struct{})
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // so the server watches the connection
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	tp := newTestProxy(t, pod, func(o *testOptions) {
		o.Transport.ResponseHeaderTimeout = 50 * time.Millisecond
	})
	t.Cleanup(func() { close(release) }) // runs before the servers close
	res := post(t, tp.srv.URL, "/v1/chat/completions", chatBody, nil)
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), `"type":"server_error"`) {
		t.Fatalf("got %d %s, want a 504 OpenAI error", res.StatusCode, body)
	}
	tp.close()
	if got := tp.outcomes(t)[decide.OutcomeUpstreamError]; got != 1 {
		t.Errorf("upstream_error = %v, want 1", got)
	}
	if got := tp.gate.got(); len(got) != 1 || got[0] != pods.Failure {
		t.Errorf("breaker results = %v, want [Failure]", got)
	}
}

// TestPodOOM500s: vLLM answers 500 with its own error body once the engine
// has died of an out-of-memory error. Each is passed through unchanged, and
// each counts against the pod's breaker.
func TestPodOOM500s(t *testing.T) {
	const vllmOOM = `{"object":"error","message":"CUDA out of memory. Tried to allocate 2.00 GiB","type":"InternalServerError","param":null,"code":500}`
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, vllmOOM)
	})
	tp := newTestProxy(t, pod, nil)
	const n = 5
	for range n {
		res := post(t, tp.srv.URL, "/v1/completions", `{"model":"m","prompt":"x"}`, nil)
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != 500 || string(body) != vllmOOM || res.Header.Get("X-Gatekeeper-Reason") != "" {
			t.Fatalf("got %d %q %s, want vLLM's 500 passed through", res.StatusCode, res.Header.Get("X-Gatekeeper-Reason"), body)
		}
	}
	tp.close()
	got := tp.gate.got()
	if len(got) != n {
		t.Fatalf("breaker results = %v, want %d failures", got, n)
	}
	for _, r := range got {
		if r != pods.Failure {
			t.Fatalf("breaker results = %v, want only failures", got)
		}
	}
	if o := tp.outcomes(t); o[decide.OutcomeUpstreamError] != n || o[decide.OutcomeServed] != 0 {
		t.Errorf("outcomes = %v, want %d upstream_error", o, n)
	}
}

// signallingAdmission tells the test when a request has asked for a slot.
type signallingAdmission struct {
	*fakeAdmission
	asked    chan struct{}
	answered chan error
}

func (a *signallingAdmission) Acquire(ctx context.Context, need decide.Need, priority int, exclude []string) (decide.Slot, error) {
	a.asked <- struct{}{}
	s, err := a.fakeAdmission.Acquire(ctx, need, priority, exclude)
	a.answered <- err
	return s, err
}

// TestClientLeavesWhileQueued: a request waiting for a window slot whose
// client goes away is never sent upstream, is counted client_closed, and
// leaves no waiter or slot behind.
func TestClientLeavesWhileQueued(t *testing.T) {
	hold := make(chan struct{})
	entered := make(chan struct{}, 1)
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		entered <- struct{}{}
		<-hold
		_, _ = io.WriteString(w, `{}`)
	})
	adm := &signallingAdmission{fakeAdmission: newFakeAdmission(1, "pod-0"), asked: make(chan struct{}, 2), answered: make(chan error, 2)}
	tp := newTestProxy(t, pod, func(o *testOptions) { o.Admission = adm })

	first := make(chan int, 1)
	go func() {
		res, err := http.Post(tp.srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"a"}`))
		if err != nil {
			first <- 0
			return
		}
		_, _ = io.Copy(io.Discard, res.Body) // leaving before the body ends would be client_closed
		res.Body.Close()
		first <- res.StatusCode
	}()
	<-adm.asked
	<-adm.answered
	<-entered // the only slot is taken

	ctx, cancel := context.WithCancel(t.Context())
	left := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tp.srv.URL+"/v1/completions",
			strings.NewReader(`{"model":"m","prompt":"b"}`))
		res, err := http.DefaultTransport.RoundTrip(req)
		if err == nil {
			res.Body.Close()
		}
		left <- err
	}()
	<-adm.asked // the second request is queued behind the first
	cancel()
	if err := <-left; err == nil {
		t.Error("the client that left got a response")
	}
	if err := <-adm.answered; !errors.Is(err, context.Canceled) {
		t.Errorf("queued Acquire = %v, want context.Canceled", err)
	}
	close(hold)
	if got := <-first; got != 200 {
		t.Errorf("first request = %d, want 200", got)
	}
	tp.close()
	if got := tp.podHits.get(); got != 1 {
		t.Errorf("pod saw %d requests, want 1: the one that left was sent upstream", got)
	}
	if o := tp.outcomes(t); o[decide.OutcomeClientClosed] != 1 || o[decide.OutcomeServed] != 1 {
		t.Errorf("outcomes = %v, want 1 served and 1 client_closed", o)
	}
	adm.mu.Lock()
	waiting, used := adm.waiting, len(adm.sem["pod-0"])
	adm.mu.Unlock()
	if waiting != 0 || used != 0 {
		t.Errorf("after both ended: %d waiting, %d slots held; want 0 and 0", waiting, used)
	}
	if got := tp.gate.got(); len(got) != 1 || got[0] != pods.Success {
		t.Errorf("breaker results = %v, want only the first request's success", got)
	}
}
