package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"
)

// StatusClientClosed is the non-standard status logged when the client left
// before an answer (nginx's 499). It is never written to a live client.
const StatusClientClosed = 499

// refusal is a decision gatekeeper makes itself: a status, a reason for the
// X-Gatekeeper-Reason header, an OpenAI-style message and, for 429/503, when
// to come back.
type refusal struct {
	status     int
	reason     Reason
	errType    string
	message    string
	param      string
	retryAfter time.Duration
}

// retryAfterer is how a rejection that knows when to come back crosses a
// package seam (STYLE §2): by behaviour, not identity.
type retryAfterer interface{ RetryAfter() time.Duration }

// statusFor maps an error from the admission path onto the status the client
// hears. It is the one place where errors become status codes.
func statusFor(err error) (int, Reason) {
	var ra retryAfterer
	switch {
	case errors.Is(err, context.Canceled):
		return StatusClientClosed, ""
	case errors.Is(err, ErrDraining):
		return http.StatusServiceUnavailable, ReasonDraining
	case errors.Is(err, ErrTooLarge):
		return http.StatusBadRequest, ReasonTooLarge
	case errors.Is(err, ErrQueueFull):
		return http.StatusServiceUnavailable, ReasonQueueFull
	case errors.Is(err, ErrDeadline):
		return http.StatusServiceUnavailable, ReasonDeadline
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, ReasonQueueTimeout
	case errors.Is(err, ErrNoUpstream):
		return http.StatusServiceUnavailable, ReasonNoUpstream
	case errors.Is(err, ErrNoMemory):
		return http.StatusServiceUnavailable, ReasonNoMemory
	case errors.As(err, &ra):
		return http.StatusTooManyRequests, ReasonRateLimited
	default:
		return http.StatusBadGateway, ReasonUpstream
	}
}

// retryAfterSeconds renders d as Retry-After's whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) string {
	s := int64(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(s, 10)
}

// errorTypes names the OpenAI error type for a status.
func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusRequestEntityTooLarge:
		return "invalid_request_error"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
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

// writeRefusal writes an OpenAI-style error with the headers of DESIGN §5.
// Header values are constants or numbers, so nothing from the request can
// inject a header; the message is JSON-encoded.
func writeRefusal(w http.ResponseWriter, rf refusal) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if rf.reason != "" {
		h.Set("X-Gatekeeper-Reason", string(rf.reason))
	}
	if rf.status == http.StatusTooManyRequests || rf.status == http.StatusServiceUnavailable || rf.retryAfter > 0 {
		h.Set("Retry-After", retryAfterSeconds(rf.retryAfter))
	}
	body := errorBody{Error: errorDetail{Message: rf.message, Type: rf.errType, Code: string(rf.reason)}}
	if body.Error.Type == "" {
		body.Error.Type = errorType(rf.status)
	}
	if body.Error.Code == "" {
		body.Error.Code = strconv.Itoa(rf.status)
	}
	if rf.param != "" {
		body.Error.Param = &rf.param
	}
	buf, _ := json.Marshal(body) // cannot fail: strings only
	buf = append(buf, '\n')
	h.Set("Content-Length", strconv.Itoa(len(buf)))
	w.WriteHeader(rf.status)
	_, _ = w.Write(buf)
}
