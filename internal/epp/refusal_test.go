package epp

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
)

// TestSubsetHint: Envoy's subset hint restricts the pick; a hint that lists
// no eligible endpoint, or none at all, is a 503 (the protocol's rule, here
// kept by the test Decider, as the core keeps it).
func TestSubsetHint(t *testing.T) {
	tests := []struct {
		name       string
		req        []*extprocv3.ProcessingRequest
		wantSubset []string // what Decide saw; nil: no hint
		wantPick   string   // "": refused with 503
	}{
		{name: "no hint: the whole pool", req: []*extprocv3.ProcessingRequest{reqHeaders(false), reqBody("{}", true)},
			wantPick: allPool},
		{name: "hint on the headers", req: []*extprocv3.ProcessingRequest{
			subset(reqHeaders(false), "10.0.0.3:8000", "10.0.0.2:8000"), reqBody("{}", true)},
			wantSubset: []string{"10.0.0.3:8000", "10.0.0.2:8000"}, wantPick: "10.0.0.2:8000,10.0.0.3:8000"},
		{name: "hint on the body's end", req: []*extprocv3.ProcessingRequest{
			reqHeaders(false), reqBody("{", false), subset(reqBody("}", true), "10.0.0.1:8000")},
			wantSubset: []string{"10.0.0.1:8000"}, wantPick: "10.0.0.1:8000"},
		{name: "hint on a body-less request", req: []*extprocv3.ProcessingRequest{subset(reqHeaders(true), "10.0.0.2:8000")},
			wantSubset: []string{"10.0.0.2:8000"}, wantPick: "10.0.0.2:8000"},
		{name: "hint as one comma-separated string", req: []*extprocv3.ProcessingRequest{
			withMetadata(reqHeaders(true), subsetNamespace, map[string]any{subsetKey: "10.0.0.2:8000, 10.0.0.1:8000"})},
			wantSubset: []string{"10.0.0.2:8000", "10.0.0.1:8000"}, wantPick: "10.0.0.1:8000,10.0.0.2:8000"},
		{name: "hint of no eligible endpoint", req: []*extprocv3.ProcessingRequest{subset(reqHeaders(true), "10.9.9.9:8000")},
			wantSubset: []string{"10.9.9.9:8000"}},
		{name: "empty hint", req: []*extprocv3.ProcessingRequest{subset(reqHeaders(true))}, wantSubset: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, newFakeDecider(), Options{})
			e := h.open()
			e.send(tt.req...)
			if tt.wantPick == "" {
				if ir := e.refused(); ir.GetStatus().GetCode() != typev3.StatusCode_ServiceUnavailable {
					t.Errorf("refused with %v, want 503", ir.GetStatus().GetCode())
				}
				e.ended()
			} else {
				length := "2"
				if tt.req[0].GetRequestHeaders().GetEndOfStream() {
					length = ""
				}
				if got := e.pick(length); got != tt.wantPick {
					t.Errorf("pick = %q, want %q", got, tt.wantPick)
				}
				e.cancel()
				h.dec.end(t)
			}
			got := h.dec.lastRequest(t).Subset
			if (got == nil) != (tt.wantSubset == nil) || !slices.Equal(got, tt.wantSubset) {
				t.Errorf("Decide saw subset %#v, want %#v", got, tt.wantSubset)
			}
			h.dec.settled(t)
		})
	}
}

// TestRefusals: a refusal reaches Envoy as an immediate response with its
// status, headers and body, and ends the stream; so do the server's own
// answers to a broken Decider, which leak no slot.
func TestRefusals(t *testing.T) {
	tests := []struct {
		name       string
		test       string // the fake's behaviour (X-Test)
		limit      int64  // MaxBodyBytes; 0: the fake's default
		body       string
		wantStatus typev3.StatusCode
		wantHeader map[string]string
		wantBody   string // "": any
		wantCode   string // the code of the server's own JSON error; "": not the server's
	}{
		{name: "shed", test: testShed, body: "{}", wantStatus: typev3.StatusCode_TooManyRequests,
			wantHeader: map[string]string{"Retry-After": "7", "X-Gatekeeper-Reason": "shed_priority", "Content-Type": "application/json"},
			wantBody:   `{"error":{"message":"shed","type":"rate_limit_error","param":null,"code":"shed_priority"}}`},
		{name: "too large", limit: 4, body: "0123456789", wantStatus: typev3.StatusCode_PayloadTooLarge, wantBody: `{"error":{}}`},
		{name: "decider gives no answer", test: testNoAnswer, body: "{}", wantStatus: typev3.StatusCode_InternalServerError,
			wantCode: "internal"},
		{name: "decider picks no endpoint", test: testNoEndpoint, body: "{}", wantStatus: typev3.StatusCode_ServiceUnavailable,
			wantCode: "no_upstream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dec := newFakeDecider()
			if tt.limit > 0 {
				dec.max = tt.limit
			}
			rec := &rejections{}
			h := newHarness(t, dec, Options{Recorder: rec})
			e := h.open()
			e.send(reqHeaders(false, "x-test", tt.test), reqBody(tt.body[:1], false), reqBody(tt.body[1:], true))
			ir := e.refused()
			if ir.GetStatus().GetCode() != tt.wantStatus {
				t.Errorf("status = %v, want %v", ir.GetStatus().GetCode(), tt.wantStatus)
			}
			for k, v := range tt.wantHeader {
				if got := header(ir, k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			if tt.wantBody != "" && string(ir.GetBody()) != tt.wantBody {
				t.Errorf("body = %s, want %s", ir.GetBody(), tt.wantBody)
			}
			if tt.wantCode != "" {
				checkOwnError(t, ir, tt.wantCode)
			}
			// The server counts its own answers by their reason; the
			// Decider's refusals are the Decider's to count.
			if got, want := rec.get(), tt.wantCode; got != want {
				t.Errorf("the server counted rejections %q, want %q", got, want)
			}
			e.ended()
			if tt.test == testNoEndpoint {
				h.dec.end(t) // the empty pick's slot, released by the server
			}
			h.dec.settled(t)
		})
	}
}

// rejections is a Recorder that keeps the reasons of Rejected.
type rejections struct {
	outcomes
	mu      sync.Mutex
	reasons []string
}

func (r *rejections) Rejected(reason decide.Reason) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reasons = append(r.reasons, string(reason))
}

func (r *rejections) get() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.reasons, ",")
}

// checkOwnError checks an answer of the server's own: OpenAI's error shape
// with the code, and the headers package proxy's refusals carry.
func checkOwnError(t *testing.T, ir *extprocv3.ImmediateResponse, code string) {
	t.Helper()
	var body struct {
		Error struct {
			Message, Type string
			Param         *string
			Code          string
		}
	}
	if err := json.Unmarshal(ir.GetBody(), &body); err != nil || body.Error.Message == "" || body.Error.Type == "" ||
		body.Error.Param != nil || body.Error.Code != code {
		t.Errorf("body = %s (%v), want an OpenAI error with code %q and param null", ir.GetBody(), err, code)
	}
	if header(ir, "Content-Type") != "application/json" || header(ir, "X-Gatekeeper-Reason") != code {
		t.Errorf("headers %v, want application/json and X-Gatekeeper-Reason %s", ir.GetHeaders(), code)
	}
}

// TestProtocolErrors: messages out of the protocol's order get a 400 of the
// server's own and end the stream, releasing a pick held; messages the
// server has no use for are answered or ignored, never a failure.
func TestProtocolErrors(t *testing.T) {
	tests := []struct {
		name    string
		req     []*extprocv3.ProcessingRequest
		picked  bool // a pick was answered before the error
		wantEnd bool // a pick was released as incomplete
	}{
		{name: "body before headers", req: []*extprocv3.ProcessingRequest{reqBody("{}", true)}},
		{name: "trailers before headers", req: []*extprocv3.ProcessingRequest{reqTrailers()}},
		{name: "body after its end", req: []*extprocv3.ProcessingRequest{reqHeaders(true), reqBody("{}", true)},
			picked: true, wantEnd: true},
		{name: "trailers after a body-less request", req: []*extprocv3.ProcessingRequest{reqHeaders(true), reqTrailers()},
			picked: true, wantEnd: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &rejections{}
			h := newHarness(t, newFakeDecider(), Options{Recorder: rec})
			e := h.open()
			e.send(tt.req...)
			if tt.picked {
				e.pick("")
			}
			ir := e.refused()
			if ir.GetStatus().GetCode() != typev3.StatusCode_BadRequest {
				t.Errorf("status = %v, want 400", ir.GetStatus().GetCode())
			}
			checkOwnError(t, ir, "bad_request")
			if got := rec.get(); got != "bad_request" {
				t.Errorf("the server counted rejections %q, want bad_request", got)
			}
			e.ended()
			if tt.wantEnd {
				if got := h.dec.end(t); got.Complete {
					t.Errorf("released with %+v, want incomplete", got)
				}
			}
			h.dec.settled(t)
		})
	}
}

// TestIgnoredMessages: a message with no part of the exchange (a flow
// control update) gets no answer, and a response the server picked nothing
// for is passed through; neither disturbs the stream.
func TestIgnoredMessages(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFakeDecider(), Options{})
	e := h.open()
	e.send(&extprocv3.ProcessingRequest{}, respHeaders(false, ":status", "502"), respBody("no upstream", true))
	if e.recv().GetResponseHeaders() == nil {
		t.Fatal("want a response headers answer")
	}
	if got := e.body(responseSide, 11, true); string(got) != "no upstream" {
		t.Fatalf("response body = %q", got)
	}
	e.send(reqHeaders(true))
	e.pick("")
	e.send(respHeaders(true, ":status", "200"))
	e.recv()
	if got := h.dec.end(t); !got.Complete || got.Status != http.StatusOK {
		t.Errorf("released with %+v, want complete 200", got)
	}
	e.closed()
	h.dec.settled(t)
}

// TestBodyModes: a stream whose first message announces body modes the
// server cannot serve is refused with a 500 at once; the modes it serves,
// or no announcement (older Envoys), are served.
func TestBodyModes(t *testing.T) {
	const (
		full     = extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
		none     = extprocfilterv3.ProcessingMode_NONE
		streamed = extprocfilterv3.ProcessingMode_STREAMED
		buffered = extprocfilterv3.ProcessingMode_BUFFERED
	)
	tests := []struct {
		name      string
		pc        *extprocv3.ProtocolConfiguration
		wantServe bool
	}{
		{name: "not announced", wantServe: true},
		{name: "full duplex both ways", pc: &extprocv3.ProtocolConfiguration{RequestBodyMode: full, ResponseBodyMode: full}, wantServe: true},
		{name: "no response body", pc: &extprocv3.ProtocolConfiguration{RequestBodyMode: full, ResponseBodyMode: none}, wantServe: true},
		{name: "request streamed", pc: &extprocv3.ProtocolConfiguration{RequestBodyMode: streamed, ResponseBodyMode: full}},
		{name: "no request body", pc: &extprocv3.ProtocolConfiguration{RequestBodyMode: none, ResponseBodyMode: full}},
		{name: "response buffered", pc: &extprocv3.ProtocolConfiguration{RequestBodyMode: full, ResponseBodyMode: buffered}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &rejections{}
			h := newHarness(t, newFakeDecider(), Options{Recorder: rec})
			e := h.open()
			first := reqHeaders(false)
			first.ProtocolConfig = tt.pc
			e.send(first, reqBody("{}", true))
			if tt.wantServe {
				e.pick("2")
				e.body(requestSide, 2, true)
				e.cancel()
				h.dec.end(t)
			} else {
				ir := e.refused()
				if ir.GetStatus().GetCode() != typev3.StatusCode_InternalServerError {
					t.Errorf("status = %v, want 500", ir.GetStatus().GetCode())
				}
				checkOwnError(t, ir, "ext_proc_mode")
				if got := rec.get(); got != "ext_proc_mode" {
					t.Errorf("the server counted rejections %q, want ext_proc_mode", got)
				}
				e.ended()
			}
			h.dec.settled(t)
		})
	}
}
