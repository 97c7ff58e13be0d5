package proxy

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// spans collects the ended spans of a test's tracer provider and says when
// a server span (the last of a request's) has ended.
type spans struct {
	rec    *tracetest.SpanRecorder
	server chan struct{}
}

func (s *spans) OnStart(ctx context.Context, sp sdktrace.ReadWriteSpan) { s.rec.OnStart(ctx, sp) }
func (s *spans) OnEnd(sp sdktrace.ReadOnlySpan) {
	s.rec.OnEnd(sp)
	if sp.SpanKind() == trace.SpanKindServer {
		s.server <- struct{}{}
	}
}
func (s *spans) Shutdown(context.Context) error   { return nil }
func (s *spans) ForceFlush(context.Context) error { return nil }

// wait returns the spans once n requests' server spans have ended.
func (s *spans) wait(t *testing.T, n int) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	for range n {
		select {
		case <-s.server:
		case <-time.After(10 * time.Second): // a bound on a broken test, not a wait
			t.Fatal("no server span ended")
		}
	}
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range s.rec.Ended() {
		out[sp.Name()] = sp
	}
	return out
}

// tracedProxy is a test proxy whose handler traces every request.
func tracedProxy(t *testing.T, pod http.Handler, trust bool, mutate func(*testOptions)) (*testProxy, *spans) {
	t.Helper()
	s := &spans{rec: tracetest.NewSpanRecorder(), server: make(chan struct{}, 16)}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s))
	return newTestProxy(t, pod, func(o *testOptions) {
		o.Extra = func(opts *Options) {
			opts.TracerProvider, opts.TrustClientContext = tp, trust
			opts.PodState = func(string) (string, int) { return "normal", 64 }
		}
		if mutate != nil {
			mutate(o)
		}
	}), s
}

func attrs(sp sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range sp.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// want checks that span has each attribute in kv (by its printed value).
func want(t *testing.T, sp sdktrace.ReadOnlySpan, kv map[string]string) {
	t.Helper()
	if sp == nil {
		t.Fatal("span missing")
	}
	got := attrs(sp)
	for k, v := range kv {
		if g, ok := got[attribute.Key(k)]; !ok || g.String() != v {
			t.Errorf("span %q: %s = %q, want %q", sp.Name(), k, g.String(), v)
		}
	}
}

const tracedChat = `{"model":"m","stream":true,"max_tokens":7,"messages":[{"role":"user","content":"secret prompt"}]}`

func TestTraceStreamed(t *testing.T) {
	var traceparent string
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		traceparent = r.Header.Get("Traceparent")
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{sseChunk("a", "null"), sseChunk("b", "null"), sseChunk("", usageOf(5, 3)), sseDone} {
			_, _ = io.WriteString(w, c)
			w.(http.Flusher).Flush()
		}
	})
	tp, s := tracedProxy(t, pod, true, nil)
	res := post(t, tp.srv.URL, "/v1/chat/completions", tracedChat, nil)
	body, _ := io.ReadAll(res.Body)
	got := s.wait(t, 1)
	server, adm, client := got["POST /v1/chat/completions"], got["gatekeeper.admission"], got["chat m"]
	want(t, server, map[string]string{"http.request.method": "POST", "http.route": "/v1/chat/completions",
		"http.response.status_code": "200", "gatekeeper.outcome": "served"})
	want(t, adm, map[string]string{"gatekeeper.outcome": "admitted", "gatekeeper.upstream": "pod-0",
		"gatekeeper.level": "normal", "gatekeeper.window": "64", "gatekeeper.estimate.tokens": "12"})
	want(t, client, map[string]string{"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
		"gen_ai.request.max_tokens": "7", "gen_ai.usage.input_tokens": "5", "gen_ai.usage.output_tokens": "3",
		"http.response.status_code": "200"})
	if _, ok := attrs(client)["gen_ai.response.time_to_first_chunk"]; !ok {
		t.Error("client span has no gen_ai.response.time_to_first_chunk")
	}
	if _, ok := attrs(adm)["gatekeeper.queue.wait"]; !ok {
		t.Error("admission span has no gatekeeper.queue.wait")
	}
	for _, sp := range []sdktrace.ReadOnlySpan{adm, client} {
		if sp.Parent().SpanID() != server.SpanContext().SpanID() {
			t.Errorf("span %q is not a child of the server span", sp.Name())
		}
	}
	wantTP := "00-" + server.SpanContext().TraceID().String() + "-" + client.SpanContext().SpanID().String() + "-01"
	if traceparent != wantTP {
		t.Errorf("the pod got traceparent %q, want %q (the client span)", traceparent, wantTP)
	}
	for _, sp := range got {
		for _, kv := range sp.Attributes() {
			if strings.Contains(kv.Value.String(), "secret") || strings.Contains(kv.Value.String(), `"b"`) {
				t.Errorf("span %q carries text: %s=%s", sp.Name(), kv.Key, kv.Value.String())
			}
		}
	}
	if !strings.Contains(string(body), "[DONE]") {
		t.Fatalf("stream cut short: %q", body)
	}
	m := histogram(t, tp, "gen_ai_server_time_to_first_token_seconds")
	var exemplars []string
	for _, b := range m.GetBucket() {
		for _, l := range b.GetExemplar().GetLabel() {
			if l.GetName() == "trace_id" {
				exemplars = append(exemplars, l.GetValue())
			}
		}
	}
	if m.GetSampleCount() != 1 || len(exemplars) != 1 || exemplars[0] != server.SpanContext().TraceID().String() {
		t.Errorf("time to first token: %d samples, exemplars %v; want 1 with the trace id", m.GetSampleCount(), exemplars)
	}
}

// histogram gathers the one series of the histogram name.
func histogram(t *testing.T, tp *testProxy, name string) *dto.Histogram {
	t.Helper()
	mfs, err := tp.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetHistogram()
		}
	}
	t.Fatalf("no series of %s", name)
	return nil
}

func TestTraceClientContext(t *testing.T) {
	const clientTP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	tests := []struct {
		name  string
		trust bool
	}{{"trusted: the parent", true}, {"untrusted: a link", false}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var podTP string
			pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				podTP = r.Header.Get("Traceparent")
				_, _ = io.WriteString(w, `{"usage":`+usageOf(1, 1)+`}`)
			})
			tp, s := tracedProxy(t, pod, tt.trust, nil)
			res := post(t, tp.srv.URL, "/v1/completions", `{"model":"m","prompt":"x"}`, map[string]string{"traceparent": clientTP})
			_, _ = io.ReadAll(res.Body)
			server := s.wait(t, 1)["POST /v1/completions"]
			inTrace := server.SpanContext().TraceID().String() == "0af7651916cd43dd8448eb211c80319c"
			linked := len(server.Links()) == 1 && server.Links()[0].SpanContext.SpanID().String() == "b7ad6b7169203331"
			if inTrace != tt.trust || linked == tt.trust {
				t.Errorf("client's trace kept: %v, linked: %v; want kept %v", inTrace, linked, tt.trust)
			}
			if !strings.Contains(podTP, server.SpanContext().TraceID().String()) || strings.Contains(podTP, "b7ad6b7169203331") {
				t.Errorf("the pod got traceparent %q, want gatekeeper's trace %s", podTP, server.SpanContext().TraceID())
			}
		})
	}
}

func TestTraceQueued(t *testing.T) {
	release := make(chan struct{})
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-First") != "" {
			<-release
		}
		_, _ = io.WriteString(w, `{"usage":`+usageOf(1, 1)+`}`)
	})
	adm := newFakeAdmission(1, "pod-0") // one slot: the second request queues
	tp, s := tracedProxy(t, pod, false, func(o *testOptions) { o.Admission = adm })
	first := make(chan struct{})
	go func() {
		defer close(first)
		res := post(t, tp.srv.URL, "/v1/completions", `{"model":"m","prompt":"x"}`, map[string]string{"X-First": "1"})
		_, _ = io.ReadAll(res.Body)
	}()
	second := make(chan struct{})
	go func() {
		defer close(second)
		for len(adm.sem["pod-0"]) == 0 { // until the first holds the slot
			runtime.Gosched()
		}
		res := post(t, tp.srv.URL, "/v1/completions", `{"model":"m","prompt":"y"}`, nil)
		_, _ = io.ReadAll(res.Body)
	}()
	for queued := 0; queued == 0; runtime.Gosched() { // until the second waits in the queue
		adm.mu.Lock()
		queued = adm.waiting
		adm.mu.Unlock()
	}
	close(release)
	<-first
	<-second
	s.wait(t, 2)
	var waits []float64
	for _, sp := range s.rec.Ended() {
		if sp.Name() == "gatekeeper.admission" {
			waits = append(waits, attrs(sp)["gatekeeper.queue.wait"].AsFloat64())
		}
	}
	if len(waits) != 2 || max(waits[0], waits[1]) <= 0 {
		t.Fatalf("admission queue waits %v, want two, one above 0", waits)
	}
}

func TestTraceRefusedAndFailed(t *testing.T) {
	tests := []struct {
		name       string
		pod        http.HandlerFunc
		mutate     func(*testOptions)
		server     map[string]string
		admission  map[string]string
		clientSpan codes.Code // codes.Unset: no client span
	}{
		{name: "refused by the rate limit",
			pod: func(w http.ResponseWriter, r *http.Request) {},
			mutate: func(o *testOptions) {
				o.Limiter = limiterFunc(func(string) error { return limitErr{time.Second} })
			},
			server:    map[string]string{"http.response.status_code": "429", "gatekeeper.reason": string(decide.ReasonRateLimited)},
			admission: map[string]string{"gatekeeper.outcome": "refused", "gatekeeper.reason": string(decide.ReasonRateLimited)}},
		{name: "a pod that fails",
			pod: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusInternalServerError)
			},
			server:     map[string]string{"http.response.status_code": "500", "gatekeeper.outcome": string(decide.OutcomeUpstreamError)},
			admission:  map[string]string{"gatekeeper.outcome": "admitted"},
			clientSpan: codes.Error},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, s := tracedProxy(t, tt.pod, false, tt.mutate)
			res := post(t, tp.srv.URL, "/v1/completions", `{"model":"m","prompt":"x"}`, nil)
			_, _ = io.ReadAll(res.Body)
			got := s.wait(t, 1)
			want(t, got["POST /v1/completions"], tt.server)
			want(t, got["gatekeeper.admission"], tt.admission)
			client, ok := got["text_completion m"]
			switch {
			case tt.clientSpan == codes.Unset && ok:
				t.Error("a refused request has a client span")
			case tt.clientSpan != codes.Unset && (!ok || client.Status().Code != tt.clientSpan):
				t.Errorf("client span %v, want status %v", ok, tt.clientSpan)
			}
		})
	}
}
