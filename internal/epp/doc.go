// Package epp is gatekeeper's second front: an Envoy ext_proc server that
// speaks the Gateway API Inference Extension's endpoint-picker protocol
// (proposal 004, v1.0). It buffers a request's headers and body, asks the
// decision core (Decider) which pod takes it, and answers with the pick, or
// with a refusal Envoy sends to the client. It holds the pick's slot until
// the response ends.
//
// # Message flow
//
// Envoy opens one gRPC stream per HTTP request and, with both body modes
// FULL_DUPLEX_STREAMED, sends its parts as they arrive without waiting for
// answers. Per stream, Server.Process:
//
//  1. RequestHeaders: records :method, :path, :authority and the other
//     headers (raw_value or value), and the subset hint
//     (metadata_context "envoy.lb.subset_hint", key
//     "x-gateway-destination-endpoint-subset"). Headers that end the
//     request (no body) are decided at once.
//  2. RequestBody chunks are buffered, not answered, up to the Decider's
//     MaxBodyBytes. The chunk with end_of_stream, or RequestTrailers, ends
//     the body; a chunk past the limit calls Decide at once with TooLarge.
//     Decide may block while the request is queued; the stream's context
//     is its ctx, so a client that leaves ends the wait.
//  3. A pick is answered, in order: the request headers' answer, setting
//     x-gateway-destination-endpoint to the endpoints (comma-separated,
//     best first: the pick, then its fallbacks), Content-Length to the
//     body's length and clearing the route cache, with the same list in
//     dynamic metadata "envoy.lb" and the pick's scores beside it under
//     x-gateway-destination-endpoint-scores (llm-d's key); then
//     the body echoed as streamed chunks of at most 62,000 bytes, the last
//     with end_of_stream; then a trailers answer if trailers ended it. A
//     TooLarge request that is admitted passes the rest of its body on as
//     it comes, its Content-Length left as the client sent it.
//  4. A refusal is an ImmediateResponse (status, headers, body) and ends
//     the stream. Messages out of the protocol's order get a 400 of the
//     server's own, in OpenAI's error shape, and end it too; so does, with
//     a 500, a stream whose first message announces body modes the server
//     cannot serve (protocol_config).
//  5. The response's headers (:status), body chunks and trailers are
//     answered at once and pass on unchanged; the body feeds a usage
//     scanner (JSON or SSE). The endpoint that really served is read from
//     metadata_context "envoy.lb", key x-gateway-destination-endpoint-served.
//  6. The response's end (a body or headers end_of_stream, or trailers)
//     calls the pick's Done with End.Complete. Any other end of the
//     exchange (a reset, Envoy closing the stream, a new request on it, a
//     protocol error) calls it with Complete false. Done is called exactly
//     once, before Process returns.
//
// # Tracing
//
// With Options.TracerProvider set, each request has a server span from its
// headers to the end that releases its pick (or its refusal). Its parent is
// the trace context Envoy sends in the stream's gRPC metadata; the
// traceparent among the request headers (the client's) is the parent only
// with Options.TrustClientContext and none from Envoy, else a link. The
// span reaches the Decider in Decide's ctx: the core's Decider puts the
// admission span under it and the request's GenAI attributes, outcome and
// usage on it, as the proxy does (package telemetry/coretrace holds what
// both share). The pick sets the span's context as the traceparent of the
// request to the pod. The server calls no pod, so it makes no client span.
//
// # Health and drain
//
// Register also serves the gRPC health service: "liveness" is SERVING while
// the server answers; "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"
// and "" are SERVING while the Decider is Ready and the server is not
// draining. Each Check computes its answer. Shutdown drains first, then
// stops the grpc.Server gracefully, so open streams run to their end.
package epp
