package epp

import (
	"context"
	"net/http"
	"time"
)

// Request is what Envoy sent of one HTTP request, once its body has ended
// (or passed the body limit).
type Request struct {
	// Method, Path and Authority come from the :method, :path and
	// :authority pseudo-headers.
	Method, Path, Authority string
	// Header holds the other request headers, canonical keys; pseudo-headers
	// are not in it.
	Header http.Header
	// Body is the whole request body; when TooLarge, the part read before
	// it passed the Decider's MaxBodyBytes.
	Body     []byte
	TooLarge bool
	// Subset is Envoy's subset hint (metadata_context namespace
	// "envoy.lb.subset_hint", key "x-gateway-destination-endpoint-subset"):
	// the only endpoints ("ip:port") the pick may use. Nil when Envoy sent
	// no hint; empty but not nil when the hint lists none.
	Subset []string
}

// Pick is an admitted request: where it goes, and the slot it holds there
// until Done.
type Pick struct {
	// Endpoints are "ip:port", best first; never empty. The first holds
	// the request's slot; the rest are fallbacks Envoy may try.
	Endpoints []string
	// Scores, if not empty, are endpoints' scores for the request (higher
	// is better), written as ScoresKey: of Endpoints and possibly of other
	// pods that could have taken it. Non-finite scores are left out.
	Scores []EndpointScore
	// Done releases what the request holds. The server calls it exactly
	// once: at the response's end of stream, or when the exchange ends
	// any other way (a reset, the gRPC stream gone, the client gone).
	Done func(End)
}

// EndpointScore is one endpoint's score for a request.
type EndpointScore struct {
	Endpoint string // "ip:port"
	Score    float64
}

// End is how an exchange ended, for the slot's release and its accounting.
type End struct {
	// Status is the response's :status; 0 when no response headers came.
	Status int
	// Served is x-gateway-destination-endpoint-served from the response's
	// metadata ("" when Envoy sent none): the endpoint that really served.
	Served string
	// PromptTokens and CompletionTokens are the usage read from the
	// response body; UsageKnown says the body carried one.
	PromptTokens, CompletionTokens int64
	UsageKnown                     bool
	// StreamError says a 200 event stream carried an error event: the pod
	// failed the request after its headers (vLLM does when generation
	// fails), a failure as a 500 would be.
	StreamError bool
	// Complete says the response reached its end of stream. False: the
	// stream was reset or ended before, or the client left.
	Complete bool
	// Duration is from the request headers to the end.
	Duration time.Duration
}

// Refusal is an answer the picker gives itself instead of a pick: Envoy
// sends it to the client as an ImmediateResponse.
type Refusal struct {
	Status int
	// Header holds the answer's headers (Content-Type, Retry-After,
	// X-Gatekeeper-Reason, ...).
	Header http.Header
	// Body is gatekeeper's OpenAI-style error body.
	Body []byte
}

// Decider is the decision core as the endpoint picker asks it.
type Decider interface {
	// Decide admits r, or refuses it. It may block while r is queued for
	// a slot; ctx ends when the gRPC stream does (the client left). When
	// the server traces, ctx carries r's server span
	// (trace.SpanFromContext): the Decider may start spans under it, on its
	// TracerProvider, and set attributes on it until Decide returns a
	// refusal or, for a pick, until its Done returns; the server ends it
	// after.
	Decide(ctx context.Context, r *Request) (*Pick, *Refusal)
	// MaxBodyBytes is the largest request body the picker buffers; past
	// it Decide is called with TooLarge.
	MaxBodyBytes() int64
	// Ready reports whether the picker can admit work now: the gRPC health
	// service "readiness" (and the ext_proc service's own) say SERVING only
	// while it does.
	Ready() bool
}
