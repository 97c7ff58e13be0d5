package epp

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
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

// errorBody is the OpenAI error shape gatekeeper answers with.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// ownRefusal is an answer the server gives itself, when Envoy's messages
// break the protocol or the Decider breaks its contract; every other
// refusal is the Decider's. reason is also X-Gatekeeper-Reason, as in
// package proxy's refusals. Envoy sets the local reply's Content-Length.
func ownRefusal(status int, reason, message string) *Refusal {
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	body, _ := json.Marshal(errorBody{Error: errorDetail{Message: message, Type: typ, Code: reason}}) // strings only: cannot fail
	body = append(body, '\n')
	return &Refusal{
		Status: status,
		Header: http.Header{
			"Content-Type":        {"application/json"},
			"Cache-Control":       {"no-store"},
			"X-Gatekeeper-Reason": {reason},
		},
		Body: body,
	}
}
