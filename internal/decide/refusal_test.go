package decide

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/classify"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

func TestBadBody(t *testing.T) {
	t.Parallel()
	rf := badBody(&classify.Error{Param: "messages[2].content", Message: "must be a string", Code: "invalid_type"})
	if rf.Status != statusBadRequest || rf.Reason != ReasonBadRequest || rf.param != "messages[2].content" ||
		rf.message != "messages[2].content: must be a string" || rf.errType != "invalid_request_error" {
		t.Errorf("BadBody(param error) = %+v", rf)
	}
	rf = badBody(errors.New("other"))
	if rf.Status != statusBadRequest || rf.message != "invalid request body" || rf.param != "" {
		t.Errorf("BadBody(other) = %+v", rf)
	}
}

// Every reason has one answer: its status, error type and Retry-After come
// from Refuse alone, and its body is the OpenAI error with the reason as
// code.
func TestRefuseEveryReason(t *testing.T) {
	t.Parallel()
	want := map[Reason]int{ReasonRateLimited: 429, ReasonQuotaExceeded: 429, ReasonBadRequest: 400, ReasonTooLarge: 400, ReasonNotFound: 404,
		ReasonModelNotFound: 404, ReasonUpstream: 502, ReasonUpstreamTimeout: 504}
	for _, r := range Reasons {
		rf := Refuse(r, "m", 0, 2*time.Second)
		status, ok := want[r]
		if !ok {
			status = 503
		}
		if rf.Status != status {
			t.Errorf("%s: status %d, want %d", r, rf.Status, status)
		}
		retry := status == 429 || status == 503
		if rf.SendsRetryAfter() != retry || retry && rf.RetryAfter != 2*time.Second {
			t.Errorf("%s: Retry-After %v (sent %v), want sent %v with the default", r, rf.RetryAfter, rf.SendsRetryAfter(), retry)
		}
		var body struct {
			Error struct{ Code, Type, Message string }
		}
		if err := json.Unmarshal(rf.Body(), &body); err != nil || body.Error.Code != string(r) || body.Error.Type == "" || body.Error.Message != "m" {
			t.Errorf("%s: body %s (%v)", r, rf.Body(), err)
		}
	}
	if rf := bodyTooLarge(10); rf.Status != 413 || rf.Reason != ReasonBadRequest || rf.SendsRetryAfter() {
		t.Errorf("BodyTooLarge = %+v", rf)
	}
	if rf := compressed(); rf.Status != 415 || rf.Reason != ReasonBadRequest {
		t.Errorf("Compressed = %+v", rf)
	}
}

// Admission errors map onto their reasons in one place.
func TestReasonFor(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]Reason{
		ErrQueueFull: ReasonQueueFull, ErrDraining: ReasonDraining, ErrNoUpstream: ReasonNoUpstream,
		errTooLarge: ReasonTooLarge, errNoMemory: ReasonNoMemory, errDeadline: ReasonDeadline,
		context.DeadlineExceeded: ReasonQueueTimeout, context.Canceled: "", errors.New("x"): ReasonUpstream,
		limitErr{time.Second}: ReasonRateLimited,
		// The queue's own errors, unwrapped, by the same table.
		queue.ErrFull: ReasonQueueFull, queue.ErrTokensFull: ReasonQueueFull, queue.ErrClosed: ReasonDraining,
		queue.ErrUnavailable: ReasonNoUpstream, queue.ErrTooLarge: ReasonTooLarge, queue.ErrNoMemory: ReasonNoMemory,
		queue.ErrDeadline: ReasonDeadline, queue.ErrDuplicateID: ReasonUpstream,
	} {
		if got := reasonFor(fmt.Errorf("wrapped: %w", err)); got != want {
			t.Errorf("ReasonFor(%v) = %q, want %q", err, got, want)
		}
	}
}

// The queue's Admission wraps each of the queue's errors in the core's
// sentinel of the same row, keeping the queue's error, and ReasonFor gives
// both the row's reason.
func TestAdmissionErrors(t *testing.T) {
	t.Parallel()
	for _, row := range admissionErrors {
		if row.queue == nil {
			if got := queueError(row.sentinel); got != row.sentinel {
				t.Errorf("queueError(%v) = %v, want it unchanged", row.sentinel, got)
			}
			continue
		}
		err := queueError(fmt.Errorf("queue: %w", row.queue))
		if !errors.Is(err, row.sentinel) || !errors.Is(err, row.queue) {
			t.Errorf("queueError(%v) = %v, want it wrapped in %v", row.queue, err, row.sentinel)
		}
		if got := reasonFor(err); got != row.reason {
			t.Errorf("ReasonFor(%v) = %q, want %q", err, got, row.reason)
		}
	}
	for _, err := range []error{context.Canceled, context.DeadlineExceeded, errors.New("other")} {
		if got := queueError(err); got != err {
			t.Errorf("queueError(%v) = %v, want it unchanged", err, got)
		}
	}
}
