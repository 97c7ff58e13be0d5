// Package control is the slow path's one controller: it turns the pressure
// readings of every upstream into decisions — level, window, whether the
// upstream takes new work, the queue's order and the relief hook events —
// and maps the policy file onto its settings. It is pure and clock-injected
// (ObserveAt): gatekeeper applies its decisions to the real queue and pool,
// the replay (sim/replay) to queue.Core on a virtual clock, so the replay's
// table is the product's.
//
// In one line: pressure says how full, control decides per upstream with
// breaker's level machine and window, queue and proxy carry it out.
package control
