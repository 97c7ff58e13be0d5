// Package pods is the pod registry of the decision core: every pod
// gatekeeper may send work to, its health as the active check last saw it,
// its error breaker, the models it serves, and whether it can take new work
// now (Availability), decided when asked from those and its pressure level.
// Nothing is pushed and nothing here does I/O: the health checker
// (pods/healthcheck) reports into it, the admission queue asks it at every
// dispatch, and both fronts (the HTTP proxy and the endpoint picker) ask it
// which pods a request may use.
//
// Lock order: the queue calls Availability under its own lock. Availability
// takes the registry's read lock, then the error breaker's and the
// controller's (atomics); none of them calls back into the queue or the
// registry, so the order is queue → registry → breaker, always.
package pods
