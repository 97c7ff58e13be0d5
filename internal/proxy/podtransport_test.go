package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestPodTransportThroughTheHandler: through the Handler's own transport
// (podconn), a pod's 103 reaches the client before the answer, which
// still carries the request id (and Connection: close while draining),
// its trailers after the body, and sequential requests share one pod
// connection.
func TestPodTransportThroughTheHandler(t *testing.T) {
	var mu sync.Mutex
	remotes := map[string]int{} // the pod's view: requests per client connection
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		remotes[r.RemoteAddr]++
		mu.Unlock()
		w.Header().Set("Link", "</hint>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Trailer", "X-Usage")
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		w.Header().Set("X-Usage", "3")
	})
	tp := newTestProxy(t, pod, nil)
	for i := range 4 {
		if i == 3 {
			tp.h.core.StartDrain() // its answer says Connection: close, 103 or not
		}
		var hints []string
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			hints = append(hints, http.StatusText(code)+" "+h.Get("Link"))
			return nil
		}}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodPost,
			tp.srv.URL+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"x","stream":true}`))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
			t.Fatalf("request %d = %d %q, %v", i, res.StatusCode, body, err)
		}
		if want := "Early Hints </hint>; rel=preload"; len(hints) != 1 || hints[0] != want {
			t.Errorf("request %d: 1xx = %q, want [%q]", i, hints, want)
		}
		if got := res.Trailer.Get("X-Usage"); got != "3" {
			t.Errorf("request %d: trailer X-Usage = %q, want 3", i, got)
		}
		// ReverseProxy clears the answer's headers after relaying a 1xx.
		if ids := res.Header.Values("X-Request-Id"); len(ids) != 1 || ids[0] == "" {
			t.Errorf("request %d: X-Request-Id = %q after the 103, want gatekeeper's id once", i, ids)
		}
		if res.Close != (i == 3) {
			t.Errorf("request %d: Connection: close is %v, want it only while draining", i, res.Close)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(remotes) != 1 {
		t.Errorf("pod connections = %v, want one for four sequential requests", remotes)
	}
}

// TestExpectContinue: a client that sends Expect: 100-continue (curl does
// for large bodies) gets one 100 Continue, from gatekeeper's server when it
// reads the body, then the pod's answer with the request id. The pod never
// sees the expectation: gatekeeper has met it, and passed on it sent the
// request down the fallback transport to wait for the pod's own 100, which
// reached the client as a second one, and ReverseProxy's relaying of that
// 100 took the request id off the answer (uvicorn, vLLM's server, sends
// one; interop's TestUvicornPod).
func TestExpectContinue(t *testing.T) {
	var mu sync.Mutex
	var expects []string // the pod's view: each request's Expect header
	remotes := map[string]int{}
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		expects = append(expects, r.Header.Get("Expect"))
		remotes[r.RemoteAddr]++
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body) // a Go pod answers 100 to an expectation here
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"text":"ok"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	})
	tp := newTestProxy(t, pod, nil)
	conn, err := net.Dial("tcp", tp.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	body := `{"model":"m","prompt":"` + strings.Repeat("x", 2000) + `"}`
	for i := range 2 {
		if _, err := io.WriteString(conn, "POST /v1/completions HTTP/1.1\r\nHost: gk\r\nContent-Type: application/json\r\n"+
			"Expect: 100-continue\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil || res.StatusCode != http.StatusContinue {
			t.Fatalf("request %d: before the body: %v, %v; want 100 Continue", i, res, err)
		}
		if _, err := io.WriteString(conn, body); err != nil {
			t.Fatal(err)
		}
		res, err = http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK || !strings.Contains(string(b), `"ok"`) {
			t.Fatalf("request %d: after the body: %d %q, %v; want the pod's 200 (a second 100 is not it)", i, res.StatusCode, b, err)
		}
		if ids := res.Header.Values("X-Request-Id"); len(ids) != 1 || ids[0] == "" {
			t.Errorf("request %d: X-Request-Id = %q, want gatekeeper's id once", i, ids)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(expects) != 2 || expects[0] != "" || expects[1] != "" {
		t.Errorf("the pod saw Expect %q, want none on either request", expects)
	}
	if len(remotes) != 1 {
		t.Errorf("pod connections = %v, want one: both requests on the Handler's own pooled transport", remotes)
	}
}
