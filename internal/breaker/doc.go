// Package breaker decides what gatekeeper does about load; it never does I/O.
//
// It holds four small machines, each usable on its own:
//
//   - Limiter, the fast breaker: a global token bucket plus optional
//     per-client buckets (golang.org/x/time/rate), its global bucket
//     optionally split between tenants (LimiterSettings.Shares: a cap and a
//     reserved part per tenant, asked through AllowTenant). A refusal is a
//     *LimitError that knows when to come back (RetryAfter). LimiterSet holds one Limiter
//     per key (a traffic class, a model) and keeps a key's buckets across
//     reloads.
//   - ErrorBreaker: a per-upstream circuit breaker fed by request outcomes
//     (sony/gobreaker/v2). A client that went away counts as neither success
//     nor failure.
//   - LevelMachine: turns pressure readings into a level (normal, degraded,
//     critical) with hysteresis and a hold time, so the level does not flap.
//   - Window: the batch window (max in-flight) of one upstream, cut while
//     degraded or critical and ramped back up while recovering.
//
// Slow combines a LevelMachine and a Window for one upstream and publishes
// the result through atomics, so the per-request read is a single load.
//
// Nothing here logs or exports metrics: machines report through return
// values (Transition, WindowUpdate), snapshots and callbacks, and the caller
// turns those into log lines and counters exactly once. Every clock is
// injected (Settings.Now, or an explicit now argument on the pure cores).
package breaker
