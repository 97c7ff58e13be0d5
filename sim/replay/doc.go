// Package replay runs a traffic trace against the simulated vLLM (package sim)
// in virtual time under three policies — no protection, gatekeeper's QPS
// limiter only, and full gatekeeper (the real breaker and queue code, driven
// through their non-blocking cores on the same virtual clock) — and prints
// the results side by side. A run may serve the trace with a pool of pods
// behind one queue (Settings.Pods), each picked by a routing (Routing), and
// size the pool as it runs (Settings.Autoscale). README.md in this folder
// gives the commands, the defaults and the tables they produce.
package replay
