// Package proxy is gatekeeper's HTTP layer: the traffic routes, the error
// writer, the reverse proxy and the upstream pool. Its parts that need no
// handler live in subpackages: classify (JSON hardening and the token
// estimate of a body), framing (the traffic listener's guard against
// ambiguous HTTP/1 framing), usage (the token usage in a pod's response),
// podconn (the transport to the pods, each exchange on the handler's own
// goroutine; NewTransport builds it) and relief (the relief hooks, which
// cmd/gatekeeper fires).
//
// A request walks one pipeline (DESIGN §2): route allow-list → body limits and
// JSON checks → classification (model, stream, estimated tokens) → fast
// breaker → slow breaker → admission into an upstream window → error breaker →
// reverse proxy, streamed chunk by chunk → release and outcome. Every request
// ends in exactly one Outcome, counted once.
//
// The traffic listener is wrapped too: SendListener puts server.send_timeout
// into each client connection, as a progress timeout, and ConnContext carries
// the connection (and framing's verdict) to the Handler.
//
// proxy decides what the client hears; it does not decide how full a GPU is
// (package pressure), what to do about it (package breaker) or who waits
// (package queue). It reaches those through the small interfaces declared in
// deps.go, which cmd/gatekeeper satisfies with thin adapters.
package proxy
