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

// The answers below are built once per message and sent once: gRPC does
// not allow a message to be changed after SendMsg returns
// (grpc.ServerStream.SendMsg: "It is not safe to modify the message after
// calling SendMsg. Tracing libraries and stats handlers may use the message
// lazily."), so none is pooled. Each holds its nested messages in one
// struct, so that an answer is one allocation rather than one per message.

// bodyMessage is a streamed body answer and the messages inside it.
type bodyMessage struct {
	resp     extprocv3.ProcessingResponse
	request  extprocv3.ProcessingResponse_RequestBody
	response extprocv3.ProcessingResponse_ResponseBody
	body     extprocv3.BodyResponse
	common   extprocv3.CommonResponse
	mutation extprocv3.BodyMutation
	streamed extprocv3.BodyMutation_StreamedResponse
	chunk    extprocv3.StreamedBodyResponse
}

// bodyChunk is one streamed body message for side.
func bodyChunk(s side, data []byte, eos bool) *extprocv3.ProcessingResponse {
	m := new(bodyMessage)
	m.chunk.Body, m.chunk.EndOfStream = data, eos
	m.streamed.StreamedResponse = &m.chunk
	m.mutation.Mutation = &m.streamed
	m.common.BodyMutation = &m.mutation
	m.body.Response = &m.common
	if s == requestSide {
		m.request.RequestBody = &m.body
		m.resp.Response = &m.request
	} else {
		m.response.ResponseBody = &m.body
		m.resp.Response = &m.response
	}
	return &m.resp
}

// trailersMessage is a trailers answer and the messages inside it.
type trailersMessage struct {
	resp     extprocv3.ProcessingResponse
	request  extprocv3.ProcessingResponse_RequestTrailers
	response extprocv3.ProcessingResponse_ResponseTrailers
	answer   extprocv3.TrailersResponse
}

// trailersResponse lets the trailers of side through unchanged.
func trailersResponse(s side) *extprocv3.ProcessingResponse {
	m := new(trailersMessage)
	if s == requestSide {
		m.request.RequestTrailers = &m.answer
		m.resp.Response = &m.request
	} else {
		m.response.ResponseTrailers = &m.answer
		m.resp.Response = &m.response
	}
	return &m.resp
}

// headersMessage is a response headers answer and the messages inside it.
type headersMessage struct {
	resp    extprocv3.ProcessingResponse
	headers extprocv3.ProcessingResponse_ResponseHeaders
	answer  extprocv3.HeadersResponse
}

// responseHeadersResponse lets the response headers through unchanged.
func responseHeadersResponse() *extprocv3.ProcessingResponse {
	m := new(headersMessage)
	m.headers.ResponseHeaders = &m.answer
	m.resp.Response = &m.headers
	return &m.resp
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
