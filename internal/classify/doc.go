// Package classify reads an inference request's body before gatekeeper
// forwards it: it refuses JSON that Go and Python could read differently
// (CheckJSON), and estimates what the request will cost a pod in tokens
// (Parse → Request), so that what gatekeeper admits is what vLLM executes.
//
// Parse takes the route's Kind, the body and an Estimator; it neither panics
// nor recurses without bound on hostile input, and refuses a body with an
// *Error that carries the field path and the OpenAI-style error code of the
// 400 that package proxy writes. Reader exposes the same
// allocation-free walk over a checked document to other readers of outside
// JSON, such as package usage; CheckJSONFields checks a document and, in the
// same pass, locates the top-level values such a reader needs.
//
// classify is pure: it imports no gatekeeper package and no net/http.
package classify
