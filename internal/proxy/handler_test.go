package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
)

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":16}`

func okPod() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","choices":[]}`)
	})
}

func post(t *testing.T, url, path, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func TestRefusals(t *testing.T) {
	tests := []struct {
		name       string
		mutate     func(*testOptions)
		path, body string
		want       int
		reason     string
		retryAfter string
		hdr        map[string]string
	}{
		{name: "served", path: "/v1/chat/completions", body: chatBody, want: 200},
		{name: "malformed json", path: "/v1/chat/completions", body: `{"model":`, want: 400, reason: "bad_request"},
		{name: "wrong type", path: "/v1/chat/completions", body: `{"model":"m","messages":"hi"}`, want: 400, reason: "bad_request"},
		{name: "admin route", path: "/reset_prefix_cache", body: `{}`, want: 404, reason: "not_found"},
		{name: "path trick", path: "/v1//chat/completions", body: chatBody, want: 404, reason: "not_found"},
		{name: "encoded slash", path: "/v1%2Fchat/completions", body: chatBody, want: 404, reason: "not_found"},
		{name: "too large", path: "/v1/chat/completions", body: strings.Repeat(" ", 2048) + chatBody, want: 413, reason: "bad_request",
			mutate: func(o *testOptions) { o.Policy.MaxBodyBytes = 1024 }},
		{name: "rate limited", path: "/v1/chat/completions", body: chatBody, want: 429, reason: "rate_limited", retryAfter: "3",
			mutate: func(o *testOptions) {
				o.Limiter = limiterFunc(func(string) error { return limitErr{2100 * time.Millisecond} })
			}},
		{name: "error breaker open: Retry-After is what it still refuses", path: "/v1/chat/completions", body: chatBody,
			want: 503, reason: "no_upstream", retryAfter: "7",
			mutate: func(o *testOptions) {
				g := o.Upstreams[0].Gate.(*recordingGate)
				g.refuse, g.left = true, 6200*time.Millisecond
			}},
		{name: "compressed body", path: "/v1/chat/completions", body: chatBody, want: 415, reason: "bad_request",
			hdr: map[string]string{"Content-Encoding": "gzip"}},
		{name: "observe mode admits", path: "/v1/chat/completions", body: chatBody, want: 200,
			mutate: func(o *testOptions) {
				o.Policy.Observe = true
				o.Limiter = limiterFunc(func(string) error { return limitErr{time.Second} })
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp := newTestProxy(t, okPod(), tt.mutate)
			res := post(t, tp.srv.URL, tt.path, tt.body, tt.hdr)
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.want {
				t.Fatalf("POST %s = %d %s, want %d", tt.path, res.StatusCode, body, tt.want)
			}
			if got := res.Header.Get("X-Gatekeeper-Reason"); got != tt.reason {
				t.Errorf("X-Gatekeeper-decide.Reason = %q, want %q", got, tt.reason)
			}
			if got := res.Header.Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tt.retryAfter)
			}
			if res.Header.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id on the response")
			}
			if tt.want != 200 {
				var e struct {
					Error struct{ Message, Type, Code string }
				}
				if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
					t.Errorf("body %s is not an OpenAI error: %v", body, err)
				}
				if tp.podHits.get() != 0 {
					t.Errorf("the pod saw %d requests, want 0", tp.podHits.get())
				}
			}
		})
	}
}

func TestStreamArrivesChunkByChunk(t *testing.T) {
	next := make(chan struct{})
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	tp := newTestProxy(t, pod, nil)
	res := post(t, tp.srv.URL, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`, nil)
	rd := bufio.NewReader(res.Body)
	for i := range 3 {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if want := fmt.Sprintf("data: {\"i\":%d}\n", i); line != want {
			t.Fatalf("chunk %d = %q, want %q", i, line, want)
		}
		_, _ = rd.ReadString('\n') // blank line ending the event
		// The pod holds the next chunk until we have read this one: a
		// buffering proxy would deadlock here.
		next <- struct{}{}
	}
	rest, _ := io.ReadAll(rd)
	if !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("stream ended with %q, want [DONE]", rest)
	}
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	started := make(chan struct{})
	cancelled := make(chan struct{})
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
		close(cancelled)
	})
	tp := newTestProxy(t, pod, nil)
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tp.srv.URL+"/v1/completions",
		strings.NewReader(`{"model":"m","prompt":"x","stream":true}`))
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	res.Body.Close()
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second): // a generous bound, not a wait for state
		t.Fatal("the upstream request was not cancelled after the client left")
	}
	tp.close() // waits for the handler to record its outcome
	if got := tp.outcomes(t)[decide.OutcomeClientClosed]; got != 1 {
		t.Errorf("client_closed = %v, want 1", got)
	}
	if got := tp.gate.got(); len(got) != 1 || got[0] != pods.Excluded {
		t.Errorf("breaker results = %v, want [Excluded]", got)
	}
}

func TestUpstreamFailureFeedsBreaker(t *testing.T) {
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"engine dead"}}`, http.StatusInternalServerError)
	})
	tp := newTestProxy(t, pod, nil)
	res := post(t, tp.srv.URL, "/v1/completions", `{"model":"m","prompt":"x"}`, nil)
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 500 || !strings.Contains(string(body), "engine dead") {
		t.Fatalf("got %d %s, want the pod's 500 passed through", res.StatusCode, body)
	}
	tp.close()
	if got := tp.gate.got(); len(got) != 1 || got[0] != pods.Failure {
		t.Errorf("breaker results = %v, want [Failure]", got)
	}
	if got := tp.outcomes(t)[decide.OutcomeUpstreamError]; got != 1 {
		t.Errorf("upstream_error = %v, want 1", got)
	}
}

func TestUnreachableUpstreamIs502(t *testing.T) {
	tp := newTestProxy(t, okPod(), func(o *testOptions) {
		o.Upstreams[0].URL.Host = "127.0.0.1:1" // nothing listens on port 1
	})
	res := post(t, tp.srv.URL, "/v1/completions", `{"model":"m","prompt":"x"}`, nil)
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("status = %d, want 502", res.StatusCode)
	}
}

func TestBodyForwardedByteForByte(t *testing.T) {
	got := make(chan string, 1)
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b) + "|" + r.Header.Get("X-Forwarded-For") + "|" + r.Header.Get("X-Request-Id")
	})
	tp := newTestProxy(t, pod, nil)
	body := `{"model":"m",  "prompt": ["a","b"] ,"max_tokens":3}`
	post(t, tp.srv.URL, "/v1/completions", body, map[string]string{"X-Request-Id": "abc-123"})
	parts := strings.Split(<-got, "|")
	if parts[0] != body {
		t.Errorf("pod got body %q, want %q", parts[0], body)
	}
	if parts[1] != "127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want 127.0.0.1", parts[1])
	}
	if parts[2] != "abc-123" {
		t.Errorf("X-Request-Id = %q, want the client's abc-123", parts[2])
	}
}

func TestHealthAndReadiness(t *testing.T) {
	tp := newTestProxy(t, okPod(), nil)
	get := func(path string) int {
		res, err := http.Get(tp.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if got := get("/readyz"); got != 200 {
		t.Fatalf("/readyz = %d, want 200", got)
	}
	tp.levels.set("pod-0", true)
	if got := get("/readyz"); got != 503 {
		t.Errorf("/readyz with every pod critical = %d, want 503", got)
	}
	res := post(t, tp.srv.URL, "/v1/completions", `{"model":"m","prompt":"x"}`, nil)
	if res.StatusCode != 503 || res.Header.Get("X-Gatekeeper-Reason") != "overloaded" || res.Header.Get("Retry-After") == "" {
		t.Errorf("request while critical = %d %q, want 503 overloaded with Retry-After", res.StatusCode, res.Header.Get("X-Gatekeeper-Reason"))
	}
	tp.levels.set("pod-0", false)
	tp.h.core.StartDrain()
	if got := get("/readyz"); got != 503 {
		t.Errorf("/readyz while draining = %d, want 503", got)
	}
	if got := get("/healthz"); got != 200 {
		t.Errorf("/healthz while draining = %d, want 200", got)
	}
	if got := post(t, tp.srv.URL, "/v1/completions", `{"model":"m","prompt":"x"}`, nil).StatusCode; got != 200 {
		t.Errorf("request during drain_delay = %d, want 200 (traffic keeps flowing)", got)
	}
	tp.h.core.Drain()
	res = post(t, tp.srv.URL, "/v1/completions", `{"model":"m","prompt":"x"}`, nil)
	if res.StatusCode != 503 || res.Header.Get("X-Gatekeeper-Reason") != "draining" {
		t.Errorf("request after drain = %d %q, want 503 draining", res.StatusCode, res.Header.Get("X-Gatekeeper-Reason"))
	}
}

// TestOutcomesAddUp sends a mix of good, bad, refused, failing and cancelled
// requests at once and checks that every one is counted exactly once.
func TestOutcomesAddUp(t *testing.T) {
	var n int
	var mu sync.Mutex
	hung := sync.Map{} // request id → cancel of that client
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Like vLLM, read the whole body first: only then does net/http
		// watch the connection and cancel r.Context() when it closes.
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Fail") != "" {
			w.WriteHeader(500)
			return
		}
		if id := r.Header.Get("X-Hang"); id != "" {
			if cancel, ok := hung.Load(id); ok {
				cancel.(context.CancelFunc)() // the client leaves once the pod has the request
			}
			<-r.Context().Done()
			return
		}
		_, _ = io.WriteString(w, "{}")
	})
	tp := newTestProxy(t, pod, func(o *testOptions) {
		o.Limiter = limiterFunc(func(k string) error {
			mu.Lock()
			defer mu.Unlock()
			n++
			if n%7 == 0 {
				return limitErr{time.Second}
			}
			return nil
		})
	})
	const total = 200
	var wg sync.WaitGroup
	for i := range total {
		wg.Go(func() {
			body, hdr := `{"model":"m","prompt":"x"}`, map[string]string{}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			switch i % 5 {
			case 1:
				body = `{"prompt":` // bad
			case 2:
				hdr["X-Fail"] = "1"
			case 3:
				id := fmt.Sprint(i)
				hdr["X-Hang"] = id
				hung.Store(id, cancel)
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tp.srv.URL+"/v1/completions", strings.NewReader(body))
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			if res, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		})
	}
	wg.Wait()
	tp.close()
	sum := 0.0
	for _, v := range tp.outcomes(t) {
		sum += v
	}
	if sum != total {
		t.Fatalf("outcomes add up to %v, want %d: %v", sum, total, tp.outcomes(t))
	}
}

func TestMethodNotAllowedSetsAllow(t *testing.T) {
	tp := newTestProxy(t, okPod(), nil)
	res, err := http.Get(tp.srv.URL + "/v1/completions")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "POST" {
		t.Errorf("GET /v1/completions = %d Allow %q, want 405 Allow POST", res.StatusCode, res.Header.Get("Allow"))
	}
}

// A pod that echoes the request id (vLLM --enable-request-id-headers), or
// sends one of its own, does not make the client see two: the client hears
// gatekeeper's one, which the pod was sent.
func TestOneRequestID(t *testing.T) {
	for _, tc := range []struct{ name, echo string }{{"echoed", ""}, {"the pod's own", "pod-id-7"}} {
		t.Run(tc.name, func(t *testing.T) {
			pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				id := r.Header.Get("X-Request-Id")
				if tc.echo != "" {
					id = tc.echo
				}
				w.Header().Set("X-Request-Id", id)
				_, _ = io.WriteString(w, `{"choices":[]}`)
			})
			tp := newTestProxy(t, pod, nil)
			for _, client := range []string{"abc-123", ""} {
				hdr := map[string]string{}
				if client != "" {
					hdr["X-Request-Id"] = client
				}
				res := post(t, tp.srv.URL, "/v1/completions", `{"model":"m","prompt":"a","max_tokens":3}`, hdr)
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if ids := res.Header.Values("X-Request-Id"); len(ids) != 1 || client != "" && ids[0] != client {
					t.Errorf("client sent %q: response X-Request-Id %q, want one (the client's)", client, ids)
				}
			}
		})
	}
}

// A client that sends its whole body before it reads the answer, as
// Python's http.client does, reads the 413 of a body over max_body_bytes
// instead of meeting a reset while it writes (issue 24), whatever the body's
// size: gatekeeper reads the rest of it to its end, bounded by time, not by
// bytes (issue 35: every body over 64 MiB met a reset). A declared
// Content-Length over the limit is answered before any byte of the body.
func TestOversizedBodyGetsA413ItCanRead(t *testing.T) {
	tp := newTestProxy(t, okPod(), func(o *testOptions) { o.Policy.MaxBodyBytes = 64 << 10 })
	tests := []struct {
		name     string
		size     int  // body bytes
		chunked  bool // Transfer-Encoding: chunked, else Content-Length
		withhold bool // the client reads the answer before it sends any of the body
	}{
		{name: "8 MiB, Content-Length", size: 8 << 20}, // far past the socket buffers
		{name: "8 MiB, chunked", size: 8 << 20, chunked: true},
		{name: "100 MiB, Content-Length", size: 100 << 20},
		{name: "100 MiB, chunked", size: 100 << 20, chunked: true},
		{name: "100 MiB declared, answered before the body", size: 100 << 20, withhold: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", tp.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			head := fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", tt.size)
			if tt.chunked {
				head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
			}
			if _, err := io.WriteString(c, head); err != nil {
				t.Fatal(err)
			}
			if !tt.withhold {
				if err := sendBody(c, tt.size, tt.chunked); err != nil {
					t.Fatalf("writing the body: %v, want the server to read it", err)
				}
			}
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			if err != nil || res.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("response %v, %v; want 413", res, err)
			}
			var e struct {
				Error struct{ Message, Type string }
			}
			if err := json.NewDecoder(res.Body).Decode(&e); err != nil || !strings.Contains(e.Error.Message, "limit of 65536 bytes") || e.Error.Type == "" {
				t.Errorf("413 body %+v, %v; want an OpenAI-style error naming the limit", e, err)
			}
			res.Body.Close()
			if tt.withhold {
				return
			}
			if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
				t.Errorf("after the 413: read %d, %v; want the connection closed cleanly (EOF, no reset)", n, err)
			}
		})
	}
}

// sendBody writes size bytes of body on c, as chunks of 1 MiB when chunked.
func sendBody(w io.Writer, size int, chunked bool) error {
	buf := bytes.Repeat([]byte("x"), 1<<20)
	for left := size; left > 0; left -= len(buf) {
		b := buf[:min(left, len(buf))]
		if chunked {
			if _, err := fmt.Fprintf(w, "%x\r\n", len(b)); err != nil {
				return err
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		if chunked {
			if _, err := io.WriteString(w, "\r\n"); err != nil {
				return err
			}
		}
	}
	if chunked {
		_, err := io.WriteString(w, "0\r\n\r\n")
		return err
	}
	return nil
}
