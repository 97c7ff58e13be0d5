// Package traffic holds what gatekeeper's traffic generators do alike: the
// request mix (weighted classes of prompt and output lengths), open-loop
// Poisson arrivals whose rate alternates between steady and burst, OpenAI
// request bodies with a prompt of a given length, and a latency quantile.
//
// Its users: the replay's synthetic trace (sim/replay, in virtual time), the
// demo's load generator (sim/load, in real time, behind gatekeeper -demo-load),
// scripts/load (burst.sh's driver) and bench/driver. Everything here is
// deterministic for a given *rand.Rand and starts no goroutine. Only commands
// and sim packages import it.
package traffic
