package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// receiver is an OTLP/HTTP collector inside the test: it decodes every
// protobuf export it is sent.
type receiver struct {
	mu      sync.Mutex
	got     []*coltrace.ExportTraceServiceRequest
	headers []http.Header
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	req := &coltrace.ExportTraceServiceRequest{}
	if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(body, req) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.got = append(rc.got, req)
	rc.headers = append(rc.headers, r.Header.Clone())
	rc.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// spans returns the names of the spans received, with their service name.
func (rc *receiver) spans() (names []string, service string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, req := range rc.got {
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.Resource.Attributes {
				if a.Key == "service.name" {
					service = a.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
				}
			}
		}
	}
	return names, service
}

func TestNewExportsOTLPHTTP(t *testing.T) {
	t.Parallel()
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	ratio := 1.0
	p, err := New(t.Context(), Settings{Endpoint: srv.URL + "/v1/traces", Protocol: HTTP, SampleRatio: &ratio,
		Headers: map[string]string{"x-api-key": "k"}, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Tracer("t").Start(context.Background(), "one", trace.WithSpanKind(trace.SpanKindServer))
	span.End()
	if err := p.Shutdown(t.Context()); err != nil { // flushes the batch
		t.Fatal(err)
	}
	names, service := rc.spans()
	if len(names) != 1 || names[0] != "one" || service != "gatekeeper" {
		t.Fatalf("received spans %q of service %q, want [one] of gatekeeper", names, service)
	}
	if got := rc.headers[0].Get("X-Api-Key"); got != "k" {
		t.Errorf("export header x-api-key = %q, want k", got)
	}
}

func TestSampleRatioZeroExportsNothing(t *testing.T) {
	t.Parallel()
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	zero := 0.0
	p, err := New(t.Context(), Settings{Endpoint: srv.URL + "/v1/traces", Protocol: HTTP, SampleRatio: &zero})
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Tracer("t").Start(context.Background(), "one")
	span.End()
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if names, _ := rc.spans(); len(names) != 0 {
		t.Fatalf("ratio 0 exported %q", names)
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	bad := 1.5
	tests := []struct {
		name string
		s    Settings
	}{
		{"ratio above 1", Settings{SampleRatio: &bad}},
		{"unknown protocol", Settings{Protocol: "udp"}},
		{"unknown env protocol", Settings{Getenv: func(k string) string {
			if k == "OTEL_EXPORTER_OTLP_PROTOCOL" {
				return "http/json"
			}
			return ""
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := New(t.Context(), tt.s); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
}

func TestProtocolFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		set  Protocol
		env  map[string]string
		want Protocol
	}{
		{"", nil, grpc},
		{"", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, HTTP},
		{"", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, HTTP},
		{grpc, map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, grpc}, // the policy wins
	}
	for _, tt := range tests {
		got, err := protocol(Settings{Protocol: tt.set}, func(k string) string { return tt.env[k] })
		if err != nil || got != tt.want {
			t.Errorf("protocol(%q, %v) = %q, %v; want %q", tt.set, tt.env, got, err, tt.want)
		}
	}
}
