package decide

import (
	"errors"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/proxy/classify"
)

func TestBadBody(t *testing.T) {
	t.Parallel()
	rf := BadBody(&classify.Error{Param: "messages[2].content", Message: "must be a string", Code: "invalid_type"})
	if rf.Status != StatusBadRequest || rf.Reason != ReasonBadRequest || rf.Param != "messages[2].content" ||
		rf.Message != "messages[2].content: must be a string" || rf.ErrType != "invalid_request_error" {
		t.Errorf("BadBody(param error) = %+v", rf)
	}
	rf = BadBody(errors.New("other"))
	if rf.Status != StatusBadRequest || rf.Message != "invalid request body" || rf.Param != "" {
		t.Errorf("BadBody(other) = %+v", rf)
	}
}
