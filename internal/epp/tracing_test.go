package epp

import (
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	grpcmd "google.golang.org/grpc/metadata"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
)

// The picker traced, Envoy's part played message by message. The tests run
// in a synctest bubble: once it is idle, every span the server will end
// for what was sent has ended.

// recorded is a tracer provider whose ended spans the test reads.
func recorded() (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	return sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), rec
}

// named returns the ended spans called name, in the order they ended.
func named(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.Name() == name {
			out = append(out, sp)
		}
	}
	return out
}

// one returns the only ended span called name.
func one(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	got := named(rec, name)
	if len(got) != 1 {
		t.Fatalf("%d %q spans ended, want 1", len(got), name)
	}
	return got[0]
}

func spanAttrs(sp sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range sp.Attributes() {
		m[kv.Key] = kv.Value.Emit()
	}
	return m
}

// wantAttrs checks that sp has each attribute of want ("" : present, any
// value).
func wantAttrs(t *testing.T, sp sdktrace.ReadOnlySpan, want map[string]string) {
	t.Helper()
	got := spanAttrs(sp)
	for k, v := range want {
		if g, ok := got[attribute.Key(k)]; !ok || v != "" && g != v {
			t.Errorf("span %q: %s = %q (set: %v), want %q", sp.Name(), k, g, ok, v)
		}
	}
}

// traceMutation reads the answer to the request headers and returns the
// trace headers it sets and those it removes.
func traceMutation(t *testing.T, e *envoy) (set map[string]string, removed []string) {
	t.Helper()
	m := e.recv()
	hm := m.GetRequestHeaders().GetResponse().GetHeaderMutation()
	if hm == nil {
		t.Fatalf("got %v, want a pick", m)
	}
	set = map[string]string{}
	for _, o := range hm.GetSetHeaders() {
		if k := o.GetHeader().GetKey(); k == "traceparent" || k == "tracestate" {
			set[k] = string(o.GetHeader().GetRawValue())
		}
	}
	return set, hm.GetRemoveHeaders()
}

const (
	envoyTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	envoySpan   = "00f067aa0ba902b7"
	clientTrace = "0af7651916cd43dd8448eb211c80319c"
	clientSpan  = "b7ad6b7169203331"
	envoyTP     = "00-" + envoyTrace + "-" + envoySpan + "-01"
	clientTP    = "00-" + clientTrace + "-" + clientSpan + "-01"
	// tracedChat asks for a token stream of at most 7 tokens; its text
	// must never reach a span.
	tracedChat = `{"model":"m","stream":true,"max_tokens":7,"messages":[{"role":"user","content":"secret prompt"}]}`
)

// Envoy's context (the stream's gRPC metadata) is the server span's parent;
// the client's (among the request headers) is the parent only when trusted
// and Envoy sent none, else a link. The pick hands the pod the server
// span's context in place of the client's.
func TestTraceParent(t *testing.T) {
	t.Parallel()
	envoyMD := grpcmd.Pairs("traceparent", envoyTP, "tracestate", "envoy=1")
	tests := []struct {
		name   string
		trust  bool
		md     grpcmd.MD // the stream's metadata, from Envoy
		header []string  // trace headers among the request's, from the client
		parent string    // "trace/span" of the server span's parent; "" for a new trace
		link   string    // the span id of its one link; "" for none
		state  string    // the tracestate the pick sets; "" : it removes the client's
	}{
		{name: "Envoy's context the parent, the client's of another trace a link", md: envoyMD,
			header: []string{"traceparent", clientTP, "tracestate", "client=1"},
			parent: envoyTrace + "/" + envoySpan, link: clientSpan, state: "envoy=1"},
		{name: "Envoy continued the client's trace: no link", md: grpcmd.Pairs("traceparent", envoyTP),
			header: []string{"traceparent", "00-" + envoyTrace + "-" + clientSpan + "-01"},
			parent: envoyTrace + "/" + envoySpan},
		{name: "Envoy's context wins over a trusted client's", trust: true, md: grpcmd.Pairs("traceparent", envoyTP),
			header: []string{"traceparent", clientTP}, parent: envoyTrace + "/" + envoySpan, link: clientSpan},
		{name: "a trusted client's context the parent when Envoy sent none", trust: true,
			header: []string{"traceparent", clientTP, "tracestate", "client=1"},
			parent: clientTrace + "/" + clientSpan, state: "client=1"},
		{name: "an untrusted client's context a link on a new trace",
			header: []string{"traceparent", clientTP, "tracestate", "client=1"}, link: clientSpan},
		{name: "no context: a new trace"},
		{name: "a malformed traceparent is none", trust: true, md: grpcmd.Pairs("traceparent", "00-zz"),
			header: []string{"traceparent", "01-" + clientTrace}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				tp, rec := recorded()
				h := newHarness(t, newFakeDecider(), Options{TracerProvider: tp, TrustClientContext: tt.trust})
				e := h.openWith(tt.md)
				e.send(reqHeaders(false, append([]string{"content-type", "application/json"}, tt.header...)...),
					reqBody(chatBody, true))
				set, removed := traceMutation(t, e)
				e.body(requestSide, len(chatBody), true)
				e.send(respHeaders(true, ":status", "200"))
				e.recv()
				e.closed()
				h.dec.end(t)
				synctest.Wait()
				sp := one(t, rec, processMethod)
				sc := sp.SpanContext()
				switch p := sp.Parent(); {
				case tt.parent == "" && p.IsValid():
					t.Errorf("parent %s/%s, want none", p.TraceID(), p.SpanID())
				case tt.parent == "" && (sc.TraceID().String() == envoyTrace || sc.TraceID().String() == clientTrace):
					t.Errorf("trace %s, want a new one", sc.TraceID())
				case tt.parent != "" && (p.TraceID().String()+"/"+p.SpanID().String() != tt.parent || !p.IsRemote()):
					t.Errorf("parent %s/%s (remote %v), want %s", p.TraceID(), p.SpanID(), p.IsRemote(), tt.parent)
				}
				var links []string
				for _, l := range sp.Links() {
					links = append(links, l.SpanContext.SpanID().String())
				}
				if want := tt.link; len(links) > 1 || want == "" && len(links) != 0 || want != "" && (len(links) != 1 || links[0] != want) {
					t.Errorf("links %v, want %q", links, want)
				}
				if got := h.dec.contexts[0]; got.SpanID() != sc.SpanID() {
					t.Errorf("Decide's ctx carries span %s, want the server span %s", got.SpanID(), sc.SpanID())
				}
				wantTP := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
				if set["traceparent"] != wantTP {
					t.Errorf("the pick sets traceparent %q, want %q (the server span's)", set["traceparent"], wantTP)
				}
				switch {
				case tt.state != "" && set["tracestate"] != tt.state:
					t.Errorf("the pick sets tracestate %q, want %q", set["tracestate"], tt.state)
				case tt.state == "" && (set["tracestate"] != "" || len(removed) != 1 || removed[0] != "tracestate"):
					t.Errorf("the pick sets tracestate %q and removes %v, want tracestate removed", set["tracestate"], removed)
				}
			})
		})
	}
}

// Tracing off: no span reaches the Decider, and the pick leaves the
// request's trace headers as they came.
func TestTraceOff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, newFakeDecider(), Options{})
		e := h.openWith(grpcmd.Pairs("traceparent", envoyTP))
		e.send(reqHeaders(false, "traceparent", clientTP, "tracestate", "client=1"), reqBody(chatBody, true))
		set, removed := traceMutation(t, e)
		e.body(requestSide, len(chatBody), true)
		e.send(respHeaders(true, ":status", "200"))
		e.recv()
		e.closed()
		h.dec.end(t)
		if len(set) != 0 || len(removed) != 0 {
			t.Errorf("the pick sets %v and removes %v, want the trace headers untouched", set, removed)
		}
		if sc := h.dec.contexts[0]; sc.IsValid() {
			t.Errorf("Decide's ctx carries span %s/%s, want none", sc.TraceID(), sc.SpanID())
		}
	})
}

// tracedCore is a picker over the real core that traces, with classes and
// fair tenants so that the admission span has all it can carry.
func tracedCore(t *testing.T, limiter breaker.LimiterSettings) (*corePicker, *tracetest.SpanRecorder) {
	t.Helper()
	tp, rec := recorded()
	pol := decide.Policy{Fair: &decide.Fairness{TenantHeader: "x-tenant"},
		Classes: &decide.Classes{Header: "x-class", Default: "standard", List: []decide.Class{{Name: "standard"}, {Name: "interactive", Priority: 1}}}}
	cp := newCorePickerExtra(t, 4, limiter, pol, coreExtra{server: Options{TracerProvider: tp},
		podState: func(string) (string, int) { return "normal", 4 }})
	return cp, rec
}

// The server span lives from the request's headers to the response's end
// of stream, with the admission span under it; both carry what the proxy's
// carry, and no text of the request.
func TestTraceAdmission(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cp, rec := tracedCore(t, breaker.LimiterSettings{})
		e := cp.open()
		e.send(reqHeaders(false, "content-type", "application/json", "x-class", "interactive", "x-tenant", "acme",
			"x-request-id", "req-1"), reqBody(tracedChat, true))
		pick := e.pick(strconv.Itoa(len(tracedChat)))
		e.body(requestSide, len(tracedChat), true)
		e.send(respHeaders(false, ":status", "200", "content-type", "text/event-stream"))
		e.recv()
		e.send(respBody(sseUsage, false))
		e.body(responseSide, len(sseUsage), false)
		synctest.Wait()
		if n := len(named(rec, processMethod)); n != 0 {
			t.Fatalf("%d server spans ended mid-response, want none before the end of stream", n)
		}
		adm := one(t, rec, "gatekeeper.admission")
		e.send(respBody(sseDone, true))
		e.body(responseSide, len(sseDone), true)
		e.closed()
		cp.settled(t)
		server := one(t, rec, processMethod)
		upstream := map[string]string{"10.0.0.1:8000": "a", "10.0.0.2:8000": "b"}[pick]
		wantAttrs(t, server, map[string]string{"rpc.system.name": "grpc", "rpc.method": processMethod,
			"http.request.method": "POST", "url.path": "/v1/chat/completions", "http.route": "/v1/chat/completions",
			"gatekeeper.request_id": "req-1", "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
			"gen_ai.request.max_tokens": "7", "gatekeeper.upstream": upstream, "gen_ai.usage.input_tokens": "7",
			"gen_ai.usage.output_tokens": "10", "gatekeeper.outcome": "served", "http.response.status_code": "200"})
		wantAttrs(t, adm, map[string]string{"gatekeeper.class": "interactive", "gatekeeper.tenant": "",
			"gatekeeper.queue.wait": "", "gatekeeper.estimate.tokens": "", "gatekeeper.estimate.memory": "",
			"gatekeeper.upstream": upstream, "gatekeeper.level": "normal", "gatekeeper.window": "4",
			"gatekeeper.outcome": "admitted"})
		if tenant := spanAttrs(adm)["gatekeeper.tenant"]; !strings.HasPrefix(tenant, "sha256:") {
			t.Errorf("gatekeeper.tenant = %q, want the queue's key of an unnamed tenant (its hash, never its value)", tenant)
		}
		if adm.Parent().SpanID() != server.SpanContext().SpanID() {
			t.Error("the admission span is not a child of the server span")
		}
		if server.Status().Code == codes.Error || adm.Status().Code == codes.Error {
			t.Error("a served request's spans are marked as errors")
		}
		for _, sp := range rec.Ended() {
			for k, v := range spanAttrs(sp) {
				if strings.Contains(v, "secret") {
					t.Errorf("span %q carries the prompt: %s=%s", sp.Name(), k, v)
				}
			}
		}
	})
}

// Every end of an exchange ends its server span, with the outcome the
// core recorded: a refusal at admission (under an admission span that says
// why), one before it (no admission span), a stream reset mid-response.
func TestTraceEnds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cp, rec := tracedCore(t, breaker.LimiterSettings{QPS: 0.001, Burst: 1})
		e := cp.open()
		chat(e)
		e.pick(strconv.Itoa(len(chatBody)))
		e.body(requestSide, len(chatBody), true)
		e.send(respHeaders(false, ":status", "200", "content-type", "text/event-stream"))
		e.recv()
		e.cancel() // Envoy resets the stream: the client left mid-response
		cp.settled(t)
		tests := []struct {
			name      string
			send      []*extprocv3.ProcessingRequest
			admission string // the admission span's reason; "" for no admission span
			want      map[string]string
			err       bool // the server span's status is an error
		}{
			{name: "shed by the bucket", send: []*extprocv3.ProcessingRequest{reqHeaders(false), reqBody(chatBody, true)},
				admission: "rate_limited", want: map[string]string{"gatekeeper.reason": "rate_limited",
					"gatekeeper.outcome": "rate_limited", "http.response.status_code": "429", "gen_ai.request.model": "m"}},
			{name: "not an inference route", send: []*extprocv3.ProcessingRequest{reqHeaders(true, ":path=v", "/v1/load_lora_adapter")},
				want: map[string]string{"gatekeeper.reason": "not_found", "gatekeeper.outcome": "bad_request",
					"http.response.status_code": "404"}},
			{name: "no endpoint in the subset", send: []*extprocv3.ProcessingRequest{reqHeaders(false),
				subset(reqBody(chatBody, true), "10.9.9.9:8000")}, want: map[string]string{"gatekeeper.reason": "no_upstream",
				"gatekeeper.outcome": "no_upstream", "http.response.status_code": "503", "error.type": "503"}, err: true},
		}
		for _, tt := range tests {
			e := cp.open()
			e.send(tt.send...)
			e.refused()
			e.ended()
		}
		cp.settled(t)
		servers := named(rec, processMethod)
		if len(servers) != 1+len(tests) {
			t.Fatalf("%d server spans ended, want %d", len(servers), 1+len(tests))
		}
		// The pod's 200 had reached the client when the stream was reset.
		wantAttrs(t, servers[0], map[string]string{"gatekeeper.outcome": "client_closed", "gatekeeper.upstream": "",
			"http.response.status_code": "200"})
		adms := named(rec, "gatekeeper.admission")
		for i, tt := range tests {
			sp := servers[i+1]
			wantAttrs(t, sp, tt.want)
			if got := sp.Status().Code == codes.Error; got != tt.err {
				t.Errorf("%s: the server span's status is an error: %v, want %v", tt.name, got, tt.err)
			}
			var adm sdktrace.ReadOnlySpan
			for _, a := range adms {
				if a.Parent().SpanID() == sp.SpanContext().SpanID() {
					adm = a
				}
			}
			switch {
			case tt.admission == "" && adm != nil:
				t.Errorf("%s: an admission span, want none (refused before admission)", tt.name)
			case tt.admission != "" && adm == nil:
				t.Errorf("%s: no admission span", tt.name)
			case tt.admission != "":
				wantAttrs(t, adm, map[string]string{"gatekeeper.outcome": "refused", "gatekeeper.reason": tt.admission})
				if adm.Status().Code != codes.Error {
					t.Errorf("%s: a refused admission's status is %v, want Error", tt.name, adm.Status().Code)
				}
			}
		}
	})
}
