package main

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/gatekeeper-dev/gatekeeper/config"
)

// otlpReceiver is an OTLP/HTTP collector inside the test.
type otlpReceiver struct {
	mu    sync.Mutex
	spans map[string]string // span name → trace id (hex)
}

func (rc *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := &coltrace.ExportTraceServiceRequest{}
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, req) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				rc.spans[s.Name] = hex.EncodeToString(s.TraceId)
			}
		}
	}
	rc.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// tracedPod answers a chat completion and keeps the traceparent it got.
type tracedPod struct {
	mu          sync.Mutex
	traceparent string
}

func (p *tracedPod) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	p.mu.Lock()
	p.traceparent = r.Header.Get("Traceparent")
	p.mu.Unlock()
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Request: r,
		Body: io.NopCloser(strings.NewReader(`{"id":"x","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}`))}, nil
}

// The running binary's wiring: with a tracing section, one request's spans
// reach an OTLP collector when the app shuts down (server, admission and
// the client span to the pod, in one trace), and the pod received that
// trace's traceparent.
func TestTracingThroughTheApp(t *testing.T) {
	rc := &otlpReceiver{spans: map[string]string{}}
	collector := httptest.NewServer(rc)
	defer collector.Close()
	cfg, err := config.Parse([]byte(`
upstreams: [{name: pod, url: "http://pod.invalid:8000"}]
fast_breaker: {qps: 0}
health_check: {interval: 1h, timeout: 1s}
tracing: {endpoint: "` + collector.URL + `/v1/traces", protocol: http, insecure: true, sample_ratio: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	pod := &tracedPod{}
	a, err := newApp(cfg, appOptions{transport: pod, getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	rec := httptest.NewRecorder()
	a.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"secret prompt"}],"max_tokens":8}`)))
	if rec.Code != 200 {
		t.Fatalf("request = %d %s", rec.Code, rec.Body.String())
	}
	a.shutdownTracer() // flushes the batch to the collector
	rc.mu.Lock()
	defer rc.mu.Unlock()
	names := make([]string, 0, len(rc.spans))
	trace := ""
	for name, id := range rc.spans {
		names = append(names, name)
		if trace != "" && id != trace {
			t.Errorf("span %q is in trace %s, another in %s: want one trace", name, id, trace)
		}
		trace = id
	}
	slices.Sort(names)
	if !slices.Contains(names, "gatekeeper.admission") || !slices.Contains(names, "chat m") || len(names) < 3 {
		t.Fatalf("spans received = %v, want the server span, gatekeeper.admission and chat m", names)
	}
	pod.mu.Lock()
	defer pod.mu.Unlock()
	if parts := strings.Split(pod.traceparent, "-"); len(parts) != 4 || parts[1] != trace {
		t.Fatalf("the pod got traceparent %q, want one in trace %s", pod.traceparent, trace)
	}
}
