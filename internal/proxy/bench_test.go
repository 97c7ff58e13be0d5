package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
)

// staticTransport answers every request at once with the same small body.
type staticTransport struct{}

func (staticTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"id":"x","choices":[]}`)), ContentLength: 23, Request: r}, nil
}

func benchHandler(b *testing.B, limiter decide.Limiter) *Handler {
	b.Helper()
	u, _ := url.Parse("http://pod.invalid:8000")
	h, err := newHandler(testOptions{
		Upstreams:    []pods.Pod{{Name: "pod", URL: u}},
		Admission:    newFakeAdmission(1<<16, "pod"),
		Limiter:      limiter,
		RoundTripper: staticTransport{},
	})
	if err != nil {
		b.Fatal(err)
	}
	return h
}

// BenchmarkServeHTTP is one chat completion through the whole pipeline
// (route, JSON check, classification, admission, reverse proxy) to a static
// transport: gatekeeper's own cost per request.
func BenchmarkServeHTTP(b *testing.B) { benchServeHTTP(b, "") }

// BenchmarkServeHTTPClientID is BenchmarkServeHTTP with a request id sent by
// the client, as a gateway in front of gatekeeper sends one.
func BenchmarkServeHTTPClientID(b *testing.B) { benchServeHTTP(b, "3f9a1c2e-client-id") }

func benchServeHTTP(b *testing.B, id string) {
	h := benchHandler(b, nil)
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("hello ", 100) + `"}],"max_tokens":64}`
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
			if id != "" {
				req.Header["X-Request-Id"] = []string{id}
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != 200 {
				b.Fatalf("status %d", rec.Code)
			}
		}
	})
}

// BenchmarkServeHTTPRefused is the refusal path: a 429 written by gatekeeper.
func BenchmarkServeHTTPRefused(b *testing.B) {
	h := benchHandler(b, limiterFunc(func(string) error { return limitErr{time.Second} }))
	body := `{"model":"m","prompt":"hi"}`
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 429 {
			b.Fatalf("status %d", rec.Code)
		}
	}
}
