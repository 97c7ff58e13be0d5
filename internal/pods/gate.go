package pods

import "time"

// Gate is a pod's error breaker. When err is nil the caller must call done
// exactly once with the request's result.
type Gate interface {
	Allow() (done func(Result), err error)
	// State says whether Allow would admit a request now. It may move the
	// breaker from open to half-open when its open time has passed, so it is
	// what makes a pod available again; it must not block.
	State() GateState
	// OpenRemaining is how long an open breaker still refuses before it
	// lets a probe through (the Retry-After of a client refused for it); 0
	// when it is not open. It must not block.
	OpenRemaining() time.Duration
}

// GateState is what a Gate would do with a request now.
type GateState int

// Gate states.
const (
	// GateReady: closed, or half-open with a probe free.
	GateReady GateState = iota
	// GateProbing: half-open and every probe is out: wait for the verdict.
	GateProbing
	// GateOpen: the pod failed recently; refused until the open time ends.
	GateOpen
)

// Result is what a finished request tells its pod's error breaker.
type Result int

// Results reported to a Gate.
const (
	// Success: the pod answered below 500.
	Success Result = iota
	// Failure: connection error, timeout, or a 5xx from the pod.
	Failure
	// Excluded: the client left; the pod is neither blamed nor credited.
	Excluded
)

// Levels reports the pressure level of each pod (the slow breaker).
type Levels interface {
	// Critical reports whether the pod must take no new work.
	Critical(pod string) bool
	// Degraded reports whether the pod is degraded or worse: sheddable
	// traffic classes are refused while every pod is.
	Degraded(pod string) bool
}
