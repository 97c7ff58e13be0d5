package podconn

import (
	"errors"
	"net/http"
)

// stage is how far a failed exchange got, which decides whether its
// request may be sent again.
type stage uint8

const (
	stageFailed     stage = iota // the request may have reached the pod
	stageUnsent                  // no byte of the request was written
	stageUnanswered              // written, and no byte of a response arrived
)

// retryable reports whether a request whose exchange on a reused
// connection failed at st may go again on a fresh one: http.Transport's
// rule. Nothing written: when its body can be rewound. Written but not
// answered: only when replaying it is harmless.
func retryable(req *http.Request, st stage) bool {
	switch st {
	case stageUnsent:
		return noBody(req) || req.GetBody != nil
	case stageUnanswered:
		return replayable(req)
	}
	return false
}

// replayable is net/http's isReplayable: a request with no body, or one it
// can rewind, whose method is idempotent or that carries an idempotency key.
func replayable(req *http.Request) bool {
	if !noBody(req) && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

func noBody(req *http.Request) bool { return req.Body == nil || req.Body == http.NoBody }

var errCannotRewind = errors.New("podconn: cannot rewind the request's body")

// rewind is req for a second exchange: the same request with a fresh body
// from GetBody (the first exchange closed its body).
func rewind(req *http.Request) (*http.Request, error) {
	if noBody(req) {
		return req, nil
	}
	if req.GetBody == nil {
		return nil, errCannotRewind
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	again := *req
	again.Body = body
	return &again, nil
}
