// Package replay runs a traffic trace against the simulated vLLM (package sim)
// in virtual time under three policies — no protection, gatekeeper's QPS
// limiter only, and full gatekeeper (the real breaker and queue code, driven
// through their non-blocking cores on the same virtual clock) — and prints
// the results side by side. README.md in this folder gives the command, the
// defaults and the table they produce.
package replay
