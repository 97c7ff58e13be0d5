package pods

import (
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
)

// Gate is a pod's error breaker as the registry and the decision core use
// it; *breaker.ErrorBreaker is one (tests pass fakes). When err is nil the
// caller must call done exactly once with the request's result.
type Gate interface {
	Allow() (done func(Result), err error)
	// Admits reports the breaker's state and whether Allow would admit a
	// request now (closed, or half-open with a probe free). It must not
	// block and must not call back into the registry.
	Admits() (breaker.State, bool)
	// OpenRemaining is how long an open breaker still refuses before it
	// lets a probe through (the Retry-After of a client refused for it); 0
	// when it is not open. It must not block.
	OpenRemaining() time.Duration
}

var _ Gate = (*breaker.ErrorBreaker)(nil)

// Result is what a finished request tells its pod's error breaker:
// breaker's own Outcome, named here so that the fronts, which report it,
// need not import breaker.
type Result = breaker.Outcome

// Results reported to a Gate (breaker's).
const (
	// Success: the pod answered below 500.
	Success = breaker.Success
	// Failure: connection error, timeout, or a 5xx from the pod.
	Failure = breaker.Failure
	// Excluded: the client left; the pod is neither blamed nor credited.
	Excluded = breaker.Excluded
)

// Levels reports the pressure level of each pod (the slow breaker).
type Levels interface {
	// Critical reports whether the pod must take no new work.
	Critical(pod string) bool
	// Degraded reports whether the pod is degraded or worse: sheddable
	// traffic classes are refused while every pod is.
	Degraded(pod string) bool
}
