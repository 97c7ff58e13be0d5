package epp

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// side says which half of the exchange a body or trailers message answers.
type side uint8

const (
	requestSide side = iota
	responseSide
)

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
