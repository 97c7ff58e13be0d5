package main

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
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

// The endpoint picker's wiring: the same tracing section traces it. Envoy's
// trace context in the ext_proc stream's metadata is continued: the
// picker's server span and the admission span reach the collector in
// Envoy's trace, and the pick hands the pod that trace.
func TestPickerTracingThroughTheApp(t *testing.T) {
	const envoyTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	rc := &otlpReceiver{spans: map[string]string{}}
	collector := httptest.NewServer(rc)
	defer collector.Close()
	cfg, err := config.Parse([]byte(`
endpoint_picker: {health_listen: "off"}
upstreams: [{name: pod, url: "http://10.0.0.1:8000"}]
fast_breaker: {qps: 0}
health_check: {interval: 1h, timeout: 1s}
tracing: {endpoint: "` + collector.URL + `/v1/traces", protocol: http, insecure: true, sample_ratio: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	a, err := newApp(cfg, appOptions{getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	p, conn := dialPicker(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+envoyTrace+"-00f067aa0ba902b7-01")
	s, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hv := func(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }
	for _, m := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{
			Headers: []*corev3.HeaderValue{hv(":method", "POST"), hv(":path", "/v1/chat/completions")}}}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
			Body: []byte(`{"model":"m","messages":[{"role":"user","content":"secret prompt"}]}`), EndOfStream: true}}},
	} {
		if err := s.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	m, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	podTP := ""
	for _, o := range m.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if o.GetHeader().GetKey() == "traceparent" {
			podTP = string(o.GetHeader().GetRawValue())
		}
	}
	if parts := strings.Split(podTP, "-"); len(parts) != 4 || parts[1] != envoyTrace {
		t.Fatalf("the pick sets traceparent %q, want one in Envoy's trace %s", podTP, envoyTrace)
	}
	if err := s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{hv(":status", "200")}},
			EndOfStream: true}}}); err != nil {
		t.Fatal(err)
	}
	_ = s.CloseSend()
	for {
		if _, err := s.Recv(); err != nil {
			break // the body echo, the response's answer, then the stream's end
		}
	}
	p.gs.GracefulStop() // every stream has returned, its spans ended
	a.shutdownTracer()  // flushes the batch to the collector
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, name := range []string{"envoy.service.ext_proc.v3.ExternalProcessor/Process", "gatekeeper.admission"} {
		if got, ok := rc.spans[name]; !ok || got != envoyTrace {
			t.Errorf("span %q received in trace %q (%v), want it in Envoy's trace %s", name, got, ok, envoyTrace)
		}
	}
}
