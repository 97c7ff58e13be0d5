// Package pods is the pod registry of the decision core: every pod
// gatekeeper may send work to, its health as the active check last saw it,
// its error breaker, the models it serves, and whether it can take new work
// now. Nothing here does I/O: the health checker (pods/healthcheck, which
// cmd runs) reports into it, and both fronts (the HTTP proxy and the
// endpoint picker) ask it which pods a request may use.
//
// The registry builds each pod's error breaker (breaker.ErrorBreaker) from
// the settings it is given (Pod.Errors) and keeps it across a Set that
// changes neither the pod's name nor those settings. Its transitions reach
// the caller through Options.BreakerChanged (logs, metrics, the window
// ceiling after a failure under load). A breaker is a Gate, and a Result is
// breaker's Outcome: pods keeps no copy of breaker's types.
//
// Availability is published, not asked: each pod's Down, Paused or
// Available is decided again when something it depends on changes (a
// health flip, an error-breaker transition, a probe a half-open breaker
// lets out or hears back, Set, SetObserve, Refresh after a pressure round)
// and stored in an atomic pointer. An open breaker becomes half-open when
// open_for has passed without telling anyone, so its snapshot records that
// moment and reads as back from then on. The admission queue reads the
// snapshot (Published) under its own lock: a map load and an atomic load,
// no lock, no call out, so there is no lock order between the queue, the
// registry, the breakers and the controller. Deciding reads the breaker's
// state and the controller's level (their own short locks and atomics) on
// the goroutine that caused the change, outside every lock; a per-pod mutex
// keeps the last decision the one stored. Availability (and the refusal
// facts: AnyAvailable, WhyDown, RetryAfter, Statuses) still decide from the
// pods' state as asked, for callers that hold no lock.
package pods
