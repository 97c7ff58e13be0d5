package interop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeVLLM answers the OpenAI routes a vLLM pod serves: chat and
// completions, streaming (SSE) and not, and /health. A request whose model is
// "hold" blocks until the test releases it, to fill gatekeeper's window.
type fakeVLLM struct {
	held    chan struct{} // one value per held request that arrived
	release chan struct{} // closed to let held requests finish
	once    sync.Once
}

func newFakeVLLM(t *testing.T) (*fakeVLLM, string) {
	t.Helper()
	f := &fakeVLLM{held: make(chan struct{}, 8), release: make(chan struct{})}
	srv := httptest.NewServer(f)
	t.Cleanup(func() { f.releaseHeld(); srv.Close() })
	return f, srv.URL
}

func (f *fakeVLLM) releaseHeld() { f.once.Do(func() { close(f.release) }) }

// words is what the fake model says, one SSE chunk per word.
func words() []string { return []string{"Hello", " from", " fake", " vLLM."} }

func (f *fakeVLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		return
	case "/v1/chat/completions", "/v1/completions":
	default:
		http.NotFound(w, r)
		return
	}
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	if req.Model == "hold" {
		f.held <- struct{}{}
		select {
		case <-f.release:
		case <-r.Context().Done():
			return
		}
	}
	chat := r.URL.Path == "/v1/chat/completions"
	if req.Stream {
		f.stream(w, chat)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	text := strings.Join(words(), "")
	usage := `"usage":{"prompt_tokens":4,"completion_tokens":4,"total_tokens":8}`
	if chat {
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":%q,`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],%s}`,
			req.Model, text, usage)
		return
	}
	fmt.Fprintf(w, `{"id":"cmpl-1","object":"text_completion","created":1,"model":%q,`+
		`"choices":[{"index":0,"text":%q,"finish_reason":"stop"}],%s}`, req.Model, text, usage)
}

func (f *fakeVLLM) stream(w http.ResponseWriter, chat bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	for _, word := range words() {
		if chat {
			fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"fake\","+
				"\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", word)
		} else {
			fmt.Fprintf(w, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"fake\","+
				"\"choices\":[{\"index\":0,\"text\":%q,\"finish_reason\":null}]}\n\n", word)
		}
		_ = rc.Flush()
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	_ = rc.Flush()
}

// hit is one request the tap saw: when it arrived and what gatekeeper said.
type hit struct {
	at         time.Time
	path       string
	status     int
	retryAfter string
	reason     string
}

// tap is a reverse proxy between the SDK and gatekeeper that records every
// attempt, so the test measures the SDK's retry waits on the server side.
type tap struct {
	// mu guards hits.
	mu   sync.Mutex
	hits []hit
}

func newTap(t *testing.T, target string) (*tap, string) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	tp := &tap{}
	// Its own transport: http.DefaultTransport is shared with every
	// httptest.Server in the process, whose Close closes its idle
	// connections.
	tr := &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport:     tr,
		FlushInterval: -1,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := hit{at: time.Now(), path: r.URL.Path}
		// The body is read whole before it is forwarded, as gatekeeper
		// does. Streamed through, it races net/http: when the answer's
		// headers are written before the transport has read the body's
		// EOF, the server drains and closes the body itself, the
		// transport's next read fails ("invalid Read on closed Body"), it
		// closes its connection to gatekeeper mid-answer, and the SDK
		// meets "TypeError: terminated" (seen under heavy load).
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		rec := &statusWriter{ResponseWriter: w}
		rp.ServeHTTP(rec, r)
		h.status, h.retryAfter, h.reason = rec.status, w.Header().Get("Retry-After"), w.Header().Get("X-Gatekeeper-Reason")
		tp.mu.Lock()
		tp.hits = append(tp.hits, h)
		tp.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return tp, srv.URL
}

func (tp *tap) take() []hit {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	out := tp.hits
	tp.hits = nil
	return out
}

// statusWriter remembers the status written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
