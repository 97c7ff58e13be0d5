package epp

import (
	"math"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// pickMessage holds the fixed parts of a pick's answer, so that they cost
// one allocation rather than one each: the answer is built once per
// request. None is reused once sent, as gRPC may read a message after Send
// returns (grpc.ServerStream.SendMsg: "It is not safe to modify the message
// after calling SendMsg"): a pool would race with it.
type pickMessage struct {
	resp     extprocv3.ProcessingResponse
	headers  extprocv3.ProcessingResponse_RequestHeaders
	answer   extprocv3.HeadersResponse
	common   extprocv3.CommonResponse
	mutation extprocv3.HeaderMutation
	// options and values are the DestinationKey and Content-Length
	// headers; set holds them, and has room for two trace headers.
	options [2]corev3.HeaderValueOption
	values  [2]corev3.HeaderValue
	set     [4]*corev3.HeaderValueOption
	length  [20]byte // Content-Length's digits
	// list holds DestinationKey's value when it fits (three endpoints of
	// 21 bytes and their commas do), within the allocation's 1,024 bytes.
	list [80]byte
	// The dynamic metadata: md holds envoy.lb (lb), which holds the
	// endpoint list (dest) and the scores, if any (in their own
	// allocation, to keep this one within 1,024 bytes).
	md, lb        structpb.Struct
	lbValue, dest structpb.Value
	lbKind        structpb.Value_StructValue
	destKind      structpb.Value_StringValue
}

// pickResponse answers the request headers with a pick: the endpoint list
// in the DestinationKey header and, the same value, in the envoy.lb dynamic
// metadata (the protocol allows a data plane to read either, so they must
// agree), with the pick's scores beside it (lbMetadata). bodyLen, when not
// negative, becomes the Content-Length: the body goes back through the
// picker, and Envoy wants the length of what it forwards. ClearRouteCache
// makes Envoy route again on the new header. traceHeaders, when the server
// traces, replace the client's trace context on the request to the pod:
// each is set, or removed when its value is "".
func pickResponse(p *Pick, bodyLen int, traceHeaders [][2]string) *extprocv3.ProcessingResponse {
	m := new(pickMessage)
	list := strings.Join(p.Endpoints, ",") // one endpoint: itself, no copy
	set := m.set[:0]
	set = append(set, m.header(0, DestinationKey, append(m.list[:0], list...)))
	if bodyLen >= 0 {
		set = append(set, m.header(1, "content-length", strconv.AppendInt(m.length[:0], int64(bodyLen), 10)))
	}
	var remove []string
	for _, h := range traceHeaders {
		if h[1] == "" {
			remove = append(remove, h[0])
		} else {
			set = append(set, setHeader(h[0], h[1]))
		}
	}
	m.mutation.SetHeaders, m.mutation.RemoveHeaders = set, remove
	m.common.ClearRouteCache, m.common.HeaderMutation = true, &m.mutation
	m.answer.Response = &m.common
	m.headers.RequestHeaders = &m.answer
	m.resp.Response = &m.headers
	m.resp.DynamicMetadata = m.lbMetadata(list, p.Scores)
	return &m.resp
}

// header is m's i-th fixed header, set as setHeader sets one; key is
// already lowercase.
func (m *pickMessage) header(i int, key string, value []byte) *corev3.HeaderValueOption {
	m.values[i].Key, m.values[i].RawValue = key, value
	m.options[i].Header, m.options[i].AppendAction = &m.values[i], corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
	return &m.options[i]
}

// lbMetadata is the pick's dynamic metadata: namespace envoy.lb with the
// endpoint list under DestinationKey and, when there are scores, a struct
// of them under ScoresKey, as llm-d-router writes it
// (pkg/epp/handlers/request.go, generateMetadata): {"ip:port": score}.
func (m *pickMessage) lbMetadata(list string, scores []EndpointScore) *structpb.Struct {
	m.destKind.StringValue = list
	m.dest.Kind = &m.destKind
	m.lb.Fields = make(map[string]*structpb.Value, 2)
	m.lb.Fields[DestinationKey] = &m.dest
	if len(scores) > 0 {
		m.lb.Fields[ScoresKey] = scoresValue(scores)
	}
	m.lbKind.StructValue = &m.lb
	m.lbValue.Kind = &m.lbKind
	m.md.Fields = map[string]*structpb.Value{metadataNamespace: &m.lbValue}
	return &m.md
}

// scoresValue is the ScoresKey struct of scores: {"ip:port": score}, the
// scores that are not finite left out (a Struct's number must be finite in
// JSON, and Envoy may log it as JSON). Its values and their kinds come two
// slices at a time, not a message each.
func scoresValue(scores []EndpointScore) *structpb.Value {
	type message struct {
		value  structpb.Value
		kind   structpb.Value_StructValue
		fields structpb.Struct
	}
	m := new(message)
	values := make([]structpb.Value, len(scores))
	numbers := make([]structpb.Value_NumberValue, len(scores))
	m.fields.Fields = make(map[string]*structpb.Value, len(scores))
	for i, s := range scores {
		if math.IsNaN(s.Score) || math.IsInf(s.Score, 0) {
			continue
		}
		numbers[i].NumberValue = s.Score
		values[i].Kind = &numbers[i]
		m.fields.Fields[s.Endpoint] = &values[i]
	}
	m.kind.StructValue = &m.fields
	m.value.Kind = &m.kind
	return &m.value
}
