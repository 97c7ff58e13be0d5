package epp

import (
	"maps"
	"net/http"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
)

// immediateResponse turns a refusal into the answer Envoy sends the client
// itself. Header keys are sorted so that the message is the same each time.
func immediateResponse(rf *Refusal) *extprocv3.ProcessingResponse {
	var set []*corev3.HeaderValueOption
	for _, k := range slices.Sorted(maps.Keys(rf.Header)) {
		for i, v := range rf.Header[k] {
			o := setHeader(k, v)
			if i > 0 {
				o.AppendAction = corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
			}
			set = append(set, o)
		}
	}
	ir := &extprocv3.ImmediateResponse{
		Status: &typev3.HttpStatus{Code: statusCode(rf.Status)},
		Body:   rf.Body,
	}
	if len(set) > 0 {
		ir.Headers = &extprocv3.HeaderMutation{SetHeaders: set}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: ir}}
}

// statusCode maps an HTTP status onto Envoy's enum. Envoy rejects a code
// its enum does not define (499, say), so such a code becomes its class's
// generic one rather than an invalid answer.
func statusCode(status int) typev3.StatusCode {
	if _, ok := typev3.StatusCode_name[int32(status)]; ok && status >= 200 {
		return typev3.StatusCode(status)
	}
	if status >= 400 && status < 500 {
		return typev3.StatusCode_BadRequest
	}
	return typev3.StatusCode_InternalServerError
}

// ownRefusal is an answer the server gives itself, when Envoy's messages
// break the protocol or the Decider breaks its contract; every other
// refusal is the Decider's. Its reason is a decide.Reason like the core's
// (X-Gatekeeper-Reason and the rejections metric), and decide.Refuse gives
// its status. Envoy sets the local reply's Content-Length.
func ownRefusal(reason decide.Reason, message string) *Refusal {
	return render(decide.Refuse(reason, message, 0, 0))
}

// render is a core refusal as the picker answers it: the proxy's headers
// and OpenAI-style body, for Envoy to send.
func render(rf decide.Refusal) *Refusal {
	h := http.Header{"Content-Type": {"application/json"}, "Cache-Control": {"no-store"}}
	if rf.Reason != "" {
		h.Set("X-Gatekeeper-Reason", string(rf.Reason))
	}
	if rf.SendsRetryAfter() {
		h.Set("Retry-After", decide.RetryAfterSeconds(rf.RetryAfter))
	}
	return &Refusal{Status: rf.Status, Header: h, Body: rf.Body()}
}
