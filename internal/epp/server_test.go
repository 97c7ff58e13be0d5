package epp

import (
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// stepClock returns a clock that advances one second each time it is read:
// an exchange reads it at its request headers and at its release, so its
// Duration is 1s.
func stepClock() func() time.Time {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Second)
		return now
	}
}

const (
	chatBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	sseUsage = `data: {"choices":[],"usage":{"prompt_tokens":7,"total_tokens":17,"completion_tokens":10}}` + "\n\n"
	sseDone  = "data: [DONE]\n\n"
	allPool  = "10.0.0.1:8000,10.0.0.2:8000,10.0.0.3:8000"
)

// TestRoundTrip plays whole exchanges as Envoy does in FULL_DUPLEX_STREAMED
// mode: the request's messages go without waiting; the answer is the pick,
// then the body echoed; each response message is answered as it comes, and
// the response's end releases the pick as complete.
func TestRoundTrip(t *testing.T) {
	full := End{Status: 200, Served: "10.0.0.2:8000", PromptTokens: 7, CompletionTokens: 10, UsageKnown: true,
		Complete: true, Duration: time.Second}
	tests := []struct {
		name        string
		req         []*extprocv3.ProcessingRequest
		wantLength  string // the Content-Length the pick sets; "" for none
		wantBody    string // the request body echoed
		echo        bool   // whether any request body message comes back
		bodyEOS     bool   // the echo ends with end_of_stream (false: trailers follow)
		reqTrailers bool   // a request trailers answer follows
		resp        []*extprocv3.ProcessingRequest
		want        End
	}{
		{
			name: "chat in chunks, sse response with usage",
			req: []*extprocv3.ProcessingRequest{reqHeaders(false, "content-type", "application/json",
				"content-length", strconv.Itoa(len(chatBody))), reqBody(chatBody[:10], false), reqBody(chatBody[10:40], false),
				reqBody(chatBody[40:], true)},
			wantLength: strconv.Itoa(len(chatBody)), wantBody: chatBody, echo: true, bodyEOS: true,
			resp: []*extprocv3.ProcessingRequest{served(respHeaders(false, ":status", "200", "content-type", "text/event-stream"), "10.0.0.2:8000"),
				respBody(`data: {"choices":[{"delta":{"content":"hel"}}]}`+"\n\n", false), respBody(sseUsage, false), respBody(sseDone, true)},
			want: full,
		},
		{
			name:       "sse usage and [DONE] in one chunk, then an empty end chunk",
			req:        []*extprocv3.ProcessingRequest{reqHeaders(false), reqBody(chatBody[:5], false), reqBody(chatBody[5:], true)},
			wantLength: strconv.Itoa(len(chatBody)), wantBody: chatBody, echo: true, bodyEOS: true,
			resp: []*extprocv3.ProcessingRequest{served(respHeaders(false, ":status", "200", "content-type", "text/event-stream"), "10.0.0.2:8000"),
				respBody("data: {}\n\n", false), respBody(sseUsage+sseDone, false), respBody("", true)},
			want: full,
		},
		{
			name:       "served reported with the body, json response ended by trailers",
			req:        []*extprocv3.ProcessingRequest{reqHeaders(false), reqBody(chatBody, true)},
			wantLength: strconv.Itoa(len(chatBody)), wantBody: chatBody, echo: true, bodyEOS: true,
			resp: []*extprocv3.ProcessingRequest{respHeaders(false, ":status", "200", "content-type", "application/json"),
				served(respBody(`{"usage":{"prompt_tokens":7,"completion_tokens":10}}`, false), "10.0.0.2:8000"), respTrailers()},
			want: full,
		},
		{
			name:       "request ended by trailers, body-less response",
			req:        []*extprocv3.ProcessingRequest{reqHeaders(false), reqBody(chatBody, false), reqTrailers()},
			wantLength: strconv.Itoa(len(chatBody)), wantBody: chatBody, echo: true, reqTrailers: true,
			resp: []*extprocv3.ProcessingRequest{respHeaders(true, ":status", "204")},
			want: End{Status: 204, Complete: true, Duration: time.Second},
		},
		{
			name: "body-less GET and response",
			req:  []*extprocv3.ProcessingRequest{reqHeaders(true, ":method", "GET")},
			resp: []*extprocv3.ProcessingRequest{served(respHeaders(true, ":status", "200"), "10.0.0.1:8000")},
			want: End{Status: 200, Served: "10.0.0.1:8000", Complete: true, Duration: time.Second},
		},
		{
			name:       "empty body",
			req:        []*extprocv3.ProcessingRequest{reqHeaders(false), reqBody("", true)},
			wantLength: "0", echo: true, bodyEOS: true,
			resp: []*extprocv3.ProcessingRequest{respHeaders(false, ":status", "200", "content-type", "application/json"),
				respBody(`{"usage":{"prompt_tokens":1,"completion_tokens":2}}`, true)},
			want: End{Status: 200, PromptTokens: 1, CompletionTokens: 2, UsageKnown: true, Complete: true, Duration: time.Second},
		},
		{
			name:       "error response: no usage",
			req:        []*extprocv3.ProcessingRequest{reqHeaders(false), reqBody(chatBody, true)},
			wantLength: strconv.Itoa(len(chatBody)), wantBody: chatBody, echo: true, bodyEOS: true,
			resp: []*extprocv3.ProcessingRequest{respHeaders(false, ":status", "500", "content-type", "application/json"),
				respBody(`{"error":{"message":"boom"},"usage":{"prompt_tokens":1}}`, true)},
			want: End{Status: 500, Complete: true, Duration: time.Second},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, newFakeDecider(), Options{Now: stepClock()})
			e := h.open()
			e.send(tt.req...)
			if got := e.pick(tt.wantLength); got != allPool {
				t.Errorf("pick = %q, want %q", got, allPool)
			}
			if tt.echo {
				if got := e.body(requestSide, len(tt.wantBody), tt.bodyEOS); string(got) != tt.wantBody {
					t.Errorf("request body echoed = %q, want %q", got, tt.wantBody)
				}
			}
			if tt.reqTrailers && e.recv().GetRequestTrailers() == nil {
				t.Error("want a request trailers answer")
			}
			for _, m := range tt.resp {
				e.send(m)
				switch r := m.GetRequest().(type) {
				case *extprocv3.ProcessingRequest_ResponseHeaders:
					if e.recv().GetResponseHeaders() == nil {
						t.Fatal("want a response headers answer")
					}
				case *extprocv3.ProcessingRequest_ResponseBody:
					b := r.ResponseBody
					if got := e.body(responseSide, len(b.GetBody()), b.GetEndOfStream()); string(got) != string(b.GetBody()) {
						t.Fatalf("response body echoed = %q, want %q", got, b.GetBody())
					}
				case *extprocv3.ProcessingRequest_ResponseTrailers:
					if e.recv().GetResponseTrailers() == nil {
						t.Fatal("want a response trailers answer")
					}
				}
			}
			if got := h.dec.end(t); got != tt.want {
				t.Errorf("released with %+v, want %+v", got, tt.want)
			}
			e.closed()
			h.dec.settled(t)
		})
	}
}

// TestRequestSeen checks what the Decider is given of the request: the
// pseudo-headers apart, the other headers under canonical keys whether
// Envoy sent raw_value or value, repeated ones in order.
func TestRequestSeen(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFakeDecider(), Options{})
	e := h.open()
	e.send(reqHeaders(false, ":scheme", "https", "x-request-id=v", "req-1", "x-a", "1", "x-a=v", "2", "content-type", "application/json"),
		reqBody("{}", true))
	e.pick("2")
	e.body(requestSide, 2, true)
	e.cancel()
	h.dec.end(t)
	got := h.dec.lastRequest(t)
	want := http.Header{"X-Request-Id": {"req-1"}, "X-A": {"1", "2"}, "Content-Type": {"application/json"}}
	if got.Method != "POST" || got.Path != "/v1/chat/completions" || got.Authority != "gw.example" ||
		string(got.Body) != "{}" || got.TooLarge || got.Subset != nil || !equalHeader(got.Header, want) {
		t.Errorf("Decide saw %+v, want POST /v1/chat/completions at gw.example, headers %v, body {}, no subset", got, want)
	}
	h.dec.settled(t)
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}
