// Package epp is gatekeeper's second front: an Envoy ext_proc server that
// speaks the Gateway API Inference Extension's endpoint-picker protocol. It
// buffers a request's headers and body, asks the decision core (Decider)
// which pod takes it, and answers with the pick, or with a refusal Envoy
// sends to the client. It holds the pick's slot until the response ends.
package epp
