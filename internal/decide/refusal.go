package decide

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// HTTP statuses a refusal carries. decide imports no net/http: the numbers
// are the protocol's, the same in an HTTP answer and an ImmediateResponse.
const (
	statusBadRequest         = 400
	statusNotFound           = 404
	StatusMethodNotAllowed   = 405
	StatusEntityTooLarge     = 413
	statusUnsupportedMedia   = 415
	statusTooManyRequests    = 429
	StatusClientClosed       = 499 // nginx's: logged, never written to a live client
	statusInternalError      = 500
	statusBadGateway         = 502
	statusServiceUnavailable = 503
	statusGatewayTimeout     = 504
	statusHTTPVersion        = 505
	maxRetryAfter            = 60 * time.Second
	defaultRateLimitedRetry  = time.Second
	errTypeInvalidRequest    = "invalid_request_error"
	errTypeRateLimit         = "rate_limit_error"
	errTypeServer            = "server_error"
	errTypeNotFound          = "not_found_error"
)

// Reasons of the answers a front gives itself about its own protocol, never
// a decision of the core (so not in Reasons, and Refuse answers them 500).
// The endpoint picker's messages that break the ext_proc exchange are
// ReasonBadRequest (400).
const (
	// ReasonInternal: the decision core broke its contract with the front
	// (it gave no answer).
	ReasonInternal Reason = "internal"
	// ReasonExtProcMode: the gateway sends the endpoint picker bodies in a
	// mode it cannot serve (a misconfigured ext_proc filter).
	ReasonExtProcMode Reason = "ext_proc_mode"
)

// Refusal is a decision gatekeeper makes itself: a status, a reason (the
// X-Gatekeeper-Reason header and the error's code), an OpenAI-style message
// and, for 429 and 503, when to come back. Both fronts render the same
// Refusal: the proxy as an HTTP answer, the endpoint picker as Envoy's
// ImmediateResponse.
type Refusal struct {
	Status     int
	Reason     Reason
	errType    string // "" → from the status
	message    string
	param      string
	RetryAfter time.Duration
}

// Refuse is the one mapping from a reason to its answer: the status, error
// type and whether Retry-After is sent all follow from the reason here, and
// nowhere else (BadRequest, BodyTooLarge and Compressed are the precise 4xx
// statuses of the one reason bad_request; LookupRoute's 405 too). message says what happened; retryAfter when to come back
// (0: the policy's default, which the caller passes as def).
func Refuse(reason Reason, message string, retryAfter, def time.Duration) Refusal {
	rf := Refusal{Status: statusOf(reason), Reason: reason, message: message, RetryAfter: retryAfter}
	switch rf.Status {
	case statusTooManyRequests:
		rf.errType = errTypeRateLimit
	case statusBadRequest, statusNotFound:
		rf.errType = errTypeInvalidRequest
	}
	if rf.RetryAfter <= 0 && (rf.Status == statusTooManyRequests || rf.Status == statusServiceUnavailable) {
		rf.RetryAfter = def
	}
	if reason == ReasonTooLarge {
		rf.RetryAfter = 0 // no wait admits it
	}
	return rf
}

// BadRequest is the 400 of a malformed request; param names the field.
func BadRequest(message, param string) Refusal {
	return malformed(statusBadRequest, message, param)
}

// bodyTooLarge is the 413 of a body past limit bytes (server.max_body_bytes).
func bodyTooLarge(limit int64) Refusal {
	return malformed(StatusEntityTooLarge, "request body is larger than the limit of "+strconv.FormatInt(limit, 10)+" bytes", "")
}

// compressed is the 415 of a compressed body: what is not classified is
// not forwarded.
func compressed() Refusal {
	return malformed(statusUnsupportedMedia, "compressed request bodies are not accepted; send the body uncompressed", "")
}

// HTTPVersionNotSupported is the 505 of a request in an HTTP version the
// listener does not serve: the client's error, not gatekeeper's.
func HTTPVersionNotSupported(message string) Refusal {
	rf := malformed(statusHTTPVersion, message, "")
	rf.errType = errTypeInvalidRequest
	return rf
}

// malformed is a bad_request refusal with its precise 4xx status.
func malformed(status int, message, param string) Refusal {
	return Refusal{Status: status, Reason: ReasonBadRequest, errType: errTypeFor(status), message: message, param: param}
}

// statusOf is every reason's status.
func statusOf(r Reason) int {
	switch r {
	case ReasonRateLimited, ReasonQuotaExceeded:
		return statusTooManyRequests
	case ReasonBadRequest, ReasonTooLarge:
		return statusBadRequest
	case ReasonNotFound, ReasonModelNotFound:
		return statusNotFound
	case ReasonUpstream:
		return statusBadGateway
	case ReasonUpstreamTimeout:
		return statusGatewayTimeout
	case ReasonInternal, ReasonExtProcMode:
		return statusInternalError
	}
	return statusServiceUnavailable
}

// retryAfterer is how a rejection that knows when to come back crosses a
// package seam (STYLE §2): by behaviour, not identity.
type retryAfterer interface{ RetryAfter() time.Duration }

// admissionErrors is the one table from an admission error to its reason:
// each of the core's sentinels, the queue's error that the queue's
// Admission wraps in it, and the reason a refusal for either carries. The
// first row an error matches wins.
var admissionErrors = [...]struct {
	sentinel, queue error
	reason          Reason
}{
	{ErrDraining, queue.ErrClosed, ReasonDraining},
	{errTooLarge, queue.ErrTooLarge, ReasonTooLarge},
	{ErrQueueFull, queue.ErrFull, ReasonQueueFull},
	{errDeadline, queue.ErrDeadline, ReasonDeadline},
	{context.DeadlineExceeded, nil, ReasonQueueTimeout}, // waited until max_wait
	{ErrNoUpstream, queue.ErrUnavailable, ReasonNoUpstream},
	{errNoMemory, queue.ErrNoMemory, ReasonNoMemory},
}

// queueError wraps an error of the queue in the core's sentinel for it, by
// admissionErrors; other errors (the context's) pass unchanged.
func queueError(err error) error {
	for _, row := range admissionErrors {
		if row.queue != nil && errors.Is(err, row.queue) {
			return fmt.Errorf("%w: %w", row.sentinel, err)
		}
	}
	return err
}

// reasonFor maps an error from the admission path onto its reason by
// admissionErrors (a sentinel or the queue's error): the one place where
// errors become refusals. "" for a client that left; rate_limited for
// another error that says when to come back; upstream_error otherwise.
func reasonFor(err error) Reason {
	if errors.Is(err, context.Canceled) {
		return ""
	}
	for _, row := range admissionErrors {
		if errors.Is(err, row.sentinel) || row.queue != nil && errors.Is(err, row.queue) {
			return row.reason
		}
	}
	var ra retryAfterer
	if errors.As(err, &ra) {
		return ReasonRateLimited
	}
	return ReasonUpstream
}

// admissionMessage is the client's message for a failed admission.
func admissionMessage(reason Reason) string {
	switch reason {
	case ReasonQueueFull:
		return "the admission queue is full; retry later"
	case ReasonQueueTimeout:
		return "waited too long for capacity; retry later"
	case ReasonDraining:
		return "gatekeeper is shutting down; retry on another replica"
	case ReasonNoUpstream:
		return "no upstream can take the request; retry later"
	case ReasonDeadline:
		return "the request cannot start before its time-to-first-token deadline; retry after the Retry-After delay"
	case ReasonNoMemory:
		return "the request needs more GPU memory than any upstream reports free for it (its sampled sequences, n/best_of, prompt_logprobs); retry later or ask for less"
	case ReasonRateLimited:
		return "rate limit exceeded; retry after the Retry-After delay"
	}
	return "could not admit the request"
}

// RetryAfterSeconds renders d as Retry-After's whole seconds, at least 1.
func RetryAfterSeconds(d time.Duration) string {
	s := int64(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(s, 10)
}

// SendsRetryAfter reports whether the answer carries Retry-After.
func (rf Refusal) SendsRetryAfter() bool {
	return rf.Status == statusTooManyRequests || rf.Status == statusServiceUnavailable || rf.RetryAfter > 0
}

func errTypeFor(status int) string {
	switch {
	case status == statusTooManyRequests:
		return errTypeRateLimit
	case status == statusNotFound:
		return errTypeNotFound
	case status >= 500:
		return errTypeServer
	}
	return errTypeInvalidRequest
}

// errorBody is the OpenAI error shape: {"error": {...}}.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// Body is the refusal's OpenAI-style JSON body, newline-terminated.
func (rf Refusal) Body() []byte {
	body := errorBody{Error: errorDetail{Message: rf.message, Type: rf.errType, Code: string(rf.Reason)}}
	if body.Error.Type == "" {
		body.Error.Type = errTypeFor(rf.Status)
	}
	if body.Error.Code == "" {
		body.Error.Code = strconv.Itoa(rf.Status)
	}
	if rf.param != "" {
		body.Error.Param = &rf.param
	}
	buf, _ := json.Marshal(body) // cannot fail: strings only
	return append(buf, '\n')
}
