// Package decide is gatekeeper's decision core, shared by both fronts (the
// HTTP proxy and the endpoint picker), and owns a request's life. Decide
// reads what the front hands it (In: the method and path, the headers, the
// body) and decides: the route allow-list (LookupRoute), the drain, the
// local models list, the body's estimate (Classify), the pods that may
// serve its model (Route) and the gateway's subset hint, then its traffic
// class, its deadline, the fast breaker's buckets, the slow breaker's
// refusals, and a slot on a pod through the admission queue and the pod's
// error breaker (Admit). Finish takes how the exchange with the pod ended
// (End) and decides, by one table, the pod's error-breaker result, the
// pod's own refusal, the true-up of what the request was charged and its
// one outcome. The fronts translate: HTTP, or Envoy's ext_proc.
//
// The core also holds the process's readiness and its shutdown: Unready is
// the one verdict both fronts and the admin listener report, and a
// shutdown's two steps (StartDrain: unready; Drain: new work refused) are
// the core's state, not a front's.
//
// Every refusal is a Refusal, and Refuse is the one mapping from a reason to
// its status, error type and Retry-After; the fronts only render it. The
// package does no I/O, imports no net/http and does not log: the pods it
// decides over are package pods, the windows package queue.
package decide
