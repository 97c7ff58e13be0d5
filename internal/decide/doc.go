// Package decide is gatekeeper's decision core, shared by both fronts (the
// HTTP proxy and the endpoint picker). For each request it reads what the
// front hands it (the route, the body, the headers) and decides: the route
// allow-list (LookupRoute), the body's estimate (Classify), the pods that
// may serve its model (Route), then its traffic class, its deadline, the
// fast breaker's buckets, the slow breaker's refusals, and a slot on a pod
// through the admission queue and the pod's error breaker (Admit).
//
// Every refusal is a Refusal, and Refuse is the one mapping from a reason to
// its status, error type and Retry-After; the fronts only render it. The
// package does no I/O, imports no net/http and does not log: the pods it
// decides over are package pods, the windows package queue.
package decide
