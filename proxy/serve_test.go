package proxy

import (
	"errors"
	"net/http"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/proxy/classify"
)

func TestBadRequestFrom(t *testing.T) {
	t.Parallel()
	rf := badRequestFrom(&classify.Error{Param: "messages[2].content", Message: "must be a string", Code: "invalid_type"})
	if rf.status != http.StatusBadRequest || rf.reason != ReasonBadRequest || rf.param != "messages[2].content" ||
		rf.message != "messages[2].content: must be a string" || rf.errType != "invalid_request_error" {
		t.Errorf("badRequestFrom(param error) = %+v", rf)
	}
	rf = badRequestFrom(errors.New("other"))
	if rf.status != http.StatusBadRequest || rf.message != "invalid request body" || rf.param != "" {
		t.Errorf("badRequestFrom(other) = %+v", rf)
	}
}
