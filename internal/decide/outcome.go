package decide

// Outcome is the one recorded end of a request (DESIGN §2). The counters of
// all outcomes add up to the requests received.
type Outcome string

// The outcomes of DESIGN §2.
const (
	OutcomeServed        Outcome = "served"
	OutcomeUpstreamError Outcome = "upstream_error"
	OutcomeRateLimited   Outcome = "rate_limited"
	OutcomeOverloaded    Outcome = "overloaded"
	OutcomeQueueFull     Outcome = "queue_full"
	OutcomeQueueTimeout  Outcome = "queue_timeout"
	OutcomeBadRequest    Outcome = "bad_request"
	OutcomeClientClosed  Outcome = "client_closed"
	// OutcomeNoUpstream: no pod could take it (failing health checks, open
	// error breakers): a dead pod, not GPU pressure.
	OutcomeNoUpstream Outcome = "no_upstream"
	// OutcomeDraining: refused while gatekeeper shuts down.
	OutcomeDraining Outcome = "draining"
	// OutcomeUpstreamOverloaded: the pod refused it itself (its own 503 or
	// 429: its queue is full), passed on with Retry-After.
	OutcomeUpstreamOverloaded Outcome = "upstream_overloaded"
	// OutcomeStreamError: the pod answered 200, then sent an error event in
	// the stream (generation failed midway).
	OutcomeStreamError Outcome = "stream_error"
	// OutcomeShedPriority: a sheddable traffic class refused while its pods
	// are degraded.
	OutcomeShedPriority Outcome = "shed_priority"
	// OutcomeClientTimeout: the client took no bytes of the answer for
	// send_timeout; the pod's request was cancelled and its slot freed.
	OutcomeClientTimeout Outcome = "client_timeout"
	// OutcomeNoMemory: refused because its estimated memory exceeds what
	// every pod it may use reports free for it (memory admission).
	OutcomeNoMemory Outcome = "no_memory"
	// OutcomeDeadline: refused because it could not start before its
	// time-to-first-token deadline (at arrival, or when it passed).
	OutcomeDeadline Outcome = "deadline"
	// OutcomeQuotaExceeded: refused because a token quota of its client
	// key, class or model had no room for its estimate.
	OutcomeQuotaExceeded Outcome = "quota_exceeded"
)

// Outcomes lists every outcome, so metrics can pre-create their series.
var Outcomes = [...]Outcome{
	OutcomeServed, OutcomeUpstreamError, OutcomeRateLimited, OutcomeOverloaded,
	OutcomeQueueFull, OutcomeQueueTimeout, OutcomeBadRequest, OutcomeClientClosed,
	OutcomeNoUpstream, OutcomeDraining, OutcomeUpstreamOverloaded, OutcomeStreamError, OutcomeShedPriority,
	OutcomeDeadline, OutcomeNoMemory, OutcomeClientTimeout, OutcomeQuotaExceeded,
}

// Reason is the X-Gatekeeper-Reason value of a refusal gatekeeper made itself.
type Reason string

// Refusal reasons (DESIGN §5).
const (
	ReasonRateLimited  Reason = "rate_limited"
	ReasonOverloaded   Reason = "overloaded"
	ReasonQueueFull    Reason = "queue_full"
	ReasonQueueTimeout Reason = "queue_timeout"
	ReasonDraining     Reason = "draining"
	ReasonBadRequest   Reason = "bad_request"
	ReasonNotFound     Reason = "not_found"
	ReasonNoUpstream   Reason = "no_upstream"
	ReasonUpstream     Reason = "upstream_error"
	// ReasonUpstreamTimeout: the pod sent no response headers in time (504).
	ReasonUpstreamTimeout Reason = "upstream_timeout"
	// ReasonUpstreamOverloaded marks a pod's own 503 or 429 passed on.
	ReasonUpstreamOverloaded Reason = "upstream_overloaded"
	// ReasonShedPriority refuses a sheddable class under pressure.
	ReasonShedPriority Reason = "shed_priority"
	// ReasonModelNotFound: no pod serves the request's model (404).
	ReasonModelNotFound Reason = "model_not_found"
	// ReasonTooLarge: the request's estimated tokens exceed what the queue
	// can ever hold (400: it is the request, not the load).
	ReasonTooLarge Reason = "too_large"
	// ReasonNoMemory: the request needs more memory than any pod reports
	// free for it (503 with Retry-After: a pod may free more).
	ReasonNoMemory Reason = "no_memory"
	// ReasonDeadline: the request could not start before its
	// time-to-first-token deadline (503 with Retry-After).
	ReasonDeadline Reason = "deadline"
	// ReasonQuotaExceeded: a token quota (per minute or per day) of the
	// request's client key, class or model is used up (429 with
	// Retry-After: when the window has room again).
	ReasonQuotaExceeded Reason = "quota_exceeded"
	// ReasonGatewayOverloaded: gatekeeper itself is saturated (its own
	// scheduling delay or requests in flight, package overload); refused
	// before its body is read (503 with Retry-After), counted as
	// overloaded.
	ReasonGatewayOverloaded Reason = "gateway_overloaded"
)

// Reasons lists every refusal reason, so metrics can pre-create their series.
var Reasons = [...]Reason{
	ReasonRateLimited, ReasonOverloaded, ReasonQueueFull, ReasonQueueTimeout, ReasonDraining,
	ReasonBadRequest, ReasonNotFound, ReasonNoUpstream, ReasonUpstream, ReasonUpstreamTimeout,
	ReasonUpstreamOverloaded, ReasonShedPriority, ReasonModelNotFound, ReasonTooLarge,
	ReasonNoMemory, ReasonDeadline, ReasonQuotaExceeded, ReasonGatewayOverloaded,
}

// DecisionReasons are the refusals decide counts as decisions: those observe
// mode counts without enforcing.
var DecisionReasons = [...]Reason{ReasonRateLimited, ReasonShedPriority, ReasonOverloaded, ReasonNoUpstream, ReasonQuotaExceeded}

// outcome maps a refusal reason onto the outcome it is counted as.
func (r Reason) Outcome() Outcome {
	switch r {
	case ReasonRateLimited:
		return OutcomeRateLimited
	case ReasonQueueFull:
		return OutcomeQueueFull
	case ReasonQueueTimeout:
		return OutcomeQueueTimeout
	case ReasonBadRequest, ReasonNotFound, ReasonModelNotFound, ReasonTooLarge:
		return OutcomeBadRequest
	case ReasonUpstream, ReasonUpstreamTimeout, ReasonInternal, ReasonExtProcMode:
		return OutcomeUpstreamError
	case ReasonNoUpstream:
		return OutcomeNoUpstream
	case ReasonDraining:
		return OutcomeDraining
	case ReasonUpstreamOverloaded:
		return OutcomeUpstreamOverloaded
	case ReasonShedPriority:
		return OutcomeShedPriority
	case ReasonDeadline:
		return OutcomeDeadline
	case ReasonNoMemory:
		return OutcomeNoMemory
	case ReasonQuotaExceeded:
		return OutcomeQuotaExceeded
	default: // overloaded: GPU pressure is critical, or gatekeeper is saturated
		return OutcomeOverloaded
	}
}
