package epp

import (
	"context"
	"io"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// scriptStream is a Process stream that plays a fixed list of messages and
// records the answers; after the list, Recv fails with end.
type scriptStream struct {
	grpc.ServerStream // nil: only Context, Send, Recv and RecvMsg are used
	ctx               context.Context
	in                []*extprocv3.ProcessingRequest
	end               error
	out               []*extprocv3.ProcessingResponse
}

func (s *scriptStream) Context() context.Context { return s.ctx }

func (s *scriptStream) Send(m *extprocv3.ProcessingResponse) error {
	s.out = append(s.out, m)
	return nil
}

func (s *scriptStream) Recv() (*extprocv3.ProcessingRequest, error) {
	if len(s.in) == 0 {
		return nil, s.end
	}
	m := s.in[0]
	s.in = s.in[1:]
	return m, nil
}

// RecvMsg is Recv into m, as gRPC's proto codec fills it: m reset, then
// a copy of the next message, bytes included, merged in.
func (s *scriptStream) RecvMsg(m any) error {
	next, err := s.Recv()
	if err != nil {
		return err
	}
	dst := m.(*extprocv3.ProcessingRequest)
	proto.Reset(dst)
	proto.Merge(dst, next)
	return nil
}

// script turns fuzz bytes into Envoy messages, two bytes each: the kind,
// then a size or a choice of the test Decider's behaviour. It plays at most
// 512 messages, fewer picks than the test Decider keeps releases of.
func script(data []byte) []*extprocv3.ProcessingRequest {
	behaviours := []string{"", testShed, testAdmitLarge, testNoAnswer, testNoEndpoint}
	var ms []*extprocv3.ProcessingRequest
	for ; len(data) >= 2 && len(ms) < 512; data = data[2:] {
		arg := int(data[1])
		switch data[0] % 10 {
		case 0, 1:
			ms = append(ms, subset(reqHeaders(data[0]%10 == 1, "x-test", behaviours[arg%len(behaviours)]),
				[]string{"10.0.0.1:8000", "10.0.0.9:8000"}[:arg%3]...))
		case 2, 3:
			ms = append(ms, reqBody(string(pattern(arg)), data[0]%10 == 3))
		case 4:
			ms = append(ms, reqTrailers())
		case 5, 6:
			ms = append(ms, served(respHeaders(data[0]%10 == 6, ":status", []string{"200", "500", "x"}[arg%3],
				"content-type", []string{"text/event-stream", "application/json"}[arg%2]), "10.0.0.1:8000"))
		case 7:
			ms = append(ms, respBody(sseUsage[:arg%len(sseUsage)], arg%2 == 0))
		case 8:
			ms = append(ms, respTrailers())
		case 9:
			ms = append(ms, &extprocv3.ProcessingRequest{})
		}
	}
	return ms
}

// FuzzExchange plays any sequence of Envoy's messages through Process.
// Properties: no panic; every answer is a valid ext_proc message, its body
// chunks within the limit; and every pick handed out is released exactly
// once by the time Process returns, however the stream ends.
func FuzzExchange(f *testing.F) {
	f.Add([]byte{0, 0, 2, 10, 3, 5, 5, 0, 7, 40, 7, 41, 8, 0}, false)
	f.Add([]byte{0, 2, 2, 200, 2, 200, 3, 1, 6, 0}, true)
	f.Add([]byte{1, 0, 0, 0, 2, 3, 4, 0, 9, 0, 1, 1}, false)
	f.Add([]byte{2, 1, 0, 1, 3, 3, 3, 3}, true)
	f.Fuzz(func(t *testing.T, data []byte, reset bool) {
		dec := newFakeDecider()
		dec.max = 64
		srv, err := NewServer(Options{Decider: dec})
		if err != nil {
			t.Fatal(err)
		}
		stream := &scriptStream{ctx: t.Context(), in: script(data), end: io.EOF}
		if reset {
			stream.end = status.Error(codes.Canceled, "reset")
		}
		if err := srv.Process(stream); err != nil {
			t.Fatalf("Process() = %v, want nil for an EOF or a reset", err)
		}
		for _, m := range stream.out {
			if err := m.ValidateAll(); err != nil {
				t.Fatalf("invalid answer %v: %v", m, err)
			}
			for _, br := range []*extprocv3.BodyResponse{m.GetRequestBody(), m.GetResponseBody()} {
				if n := len(br.GetResponse().GetBodyMutation().GetStreamedResponse().GetBody()); n > chunkLimit {
					t.Fatalf("a body chunk of %d bytes", n)
				}
			}
		}
		for range len(dec.ends) {
			<-dec.ends
		}
		dec.settled(t)
	})
}
