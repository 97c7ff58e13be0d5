package epp

import (
	"math"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// side says which half of the exchange a body or trailers message answers.
type side uint8

const (
	requestSide side = iota
	responseSide
)

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
	list := strings.Join(p.Endpoints, ",") // one endpoint: itself, no copy
	set := make([]*corev3.HeaderValueOption, 1, 2+len(traceHeaders))
	set[0] = setHeader(DestinationKey, list)
	if bodyLen >= 0 {
		set = append(set, setHeader("content-length", strconv.Itoa(bodyLen)))
	}
	var remove []string
	for _, h := range traceHeaders {
		if h[1] == "" {
			remove = append(remove, h[0])
		} else {
			set = append(set, setHeader(h[0], h[1]))
		}
	}
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{
				ClearRouteCache: true,
				HeaderMutation:  &extprocv3.HeaderMutation{SetHeaders: set, RemoveHeaders: remove},
			},
		}},
		DynamicMetadata: lbMetadata(list, p.Scores),
	}
}

// lbMetadata is the pick's dynamic metadata: namespace envoy.lb with the
// endpoint list under DestinationKey and, when there are scores, a struct
// of them under ScoresKey, as llm-d-router writes it
// (pkg/epp/handlers/request.go, generateMetadata): {"ip:port": score}.
// The score values and their kinds are allocated two slices at a time, not
// one message per score: a pick is answered once per request.
func lbMetadata(list string, scores []EndpointScore) *structpb.Struct {
	lb := make(map[string]*structpb.Value, 2)
	lb[DestinationKey] = structpb.NewStringValue(list)
	if len(scores) > 0 {
		values := make([]structpb.Value, len(scores))
		numbers := make([]structpb.Value_NumberValue, len(scores))
		fields := make(map[string]*structpb.Value, len(scores))
		for i, s := range scores {
			if math.IsNaN(s.Score) || math.IsInf(s.Score, 0) {
				continue // a Struct number must be finite in JSON, as Envoy may log it
			}
			numbers[i].NumberValue = s.Score
			values[i].Kind = &numbers[i]
			fields[s.Endpoint] = &values[i]
		}
		lb[ScoresKey] = structpb.NewStructValue(&structpb.Struct{Fields: fields})
	}
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		metadataNamespace: structpb.NewStructValue(&structpb.Struct{Fields: lb}),
	}}
}

// setHeader sets a header, replacing any value the client sent: the header
// option's default action appends, which would let a client add endpoints
// of its own to the destination list.
func setHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		// HTTP/2 field names are lowercase, and Envoy's header maps hold
		// them so: a canonical "Retry-After" would be a second header.
		Header:       &corev3.HeaderValue{Key: strings.ToLower(key), RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// bodyChunk is one streamed body message for side.
func bodyChunk(s side, data []byte, eos bool) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
		BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: data, EndOfStream: eos},
		}},
	}}
	if s == requestSide {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
}

// trailersResponse lets the trailers of side through unchanged.
func trailersResponse(s side) *extprocv3.ProcessingResponse {
	if s == requestSide {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extprocv3.TrailersResponse{}}}
}

// responseHeadersResponse lets the response headers through unchanged.
func responseHeadersResponse() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{}}}
}

// sendBody streams data back as body messages of side, at most chunkLimit
// bytes each, the last carrying eos. An empty data sends one empty message
// when eos (Envoy must see the end), none otherwise.
func sendBody(send func(*extprocv3.ProcessingResponse) error, s side, data []byte, eos bool) error {
	if len(data) == 0 {
		if !eos {
			return nil
		}
		return send(bodyChunk(s, nil, true))
	}
	for len(data) > 0 {
		n := min(len(data), chunkLimit)
		if err := send(bodyChunk(s, data[:n], eos && n == len(data))); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}
