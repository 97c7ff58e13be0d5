package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/gatekeeper-dev/gatekeeper/internal/epp"
	"github.com/gatekeeper-dev/gatekeeper/sim/traffic"
)

// envoy plays the gateway's side of the endpoint-picker protocol: a few
// HTTP/2 connections to the picker, as Envoy keeps one per worker, with one
// ext_proc stream per HTTP request multiplexed over them in turn. Safe for
// concurrent use.
type envoy struct {
	conns   []*grpc.ClientConn
	clients []extprocv3.ExternalProcessorClient
	next    atomic.Uint64
	msgs    exchangeMsgs
}

// exchangeMsgs are the messages every exchange sends; built once and only
// read after (protobuf marshals a message concurrently without writing it
// but for its atomic size cache).
type exchangeMsgs struct {
	headers, body, response *extprocv3.ProcessingRequest
	bodyLen                 int
}

// dialEnvoy opens n connections to addr (separate grpc.ClientConns, so
// separate TCP connections) and waits until each is ready.
func dialEnvoy(ctx context.Context, addr string, n, bodyBytes int) (*envoy, error) {
	e := &envoy{msgs: newExchangeMsgs(bodyBytes)}
	for range max(n, 1) {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			e.close()
			return nil, err
		}
		e.conns = append(e.conns, cc)
		e.clients = append(e.clients, extprocv3.NewExternalProcessorClient(cc))
		cc.Connect()
		for st := cc.GetState(); st != connectivity.Ready; st = cc.GetState() {
			if !cc.WaitForStateChange(ctx, st) {
				e.close()
				return nil, fmt.Errorf("driver: connecting to %s: %w", addr, ctx.Err())
			}
		}
	}
	return e, nil
}

func (e *envoy) close() {
	for _, cc := range e.conns {
		cc.Close()
	}
}

func (e *envoy) client() extprocv3.ExternalProcessorClient {
	return e.clients[(e.next.Add(1)-1)%uint64(len(e.clients))]
}

// waitServing polls addr's gRPC health service "readiness" until it says
// SERVING: gatekeeper says so once a pod has passed its health check.
func waitServing(ctx context.Context, addr string, limit time.Duration) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	end := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		r, err := hc.Check(cctx, &healthpb.HealthCheckRequest{Service: epp.ReadinessService})
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("driver: %s not SERVING readiness within %v (last: %v, %v)", addr, limit, r.GetStatus(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// newExchangeMsgs builds a chat request of about bodyBytes bytes, its
// headers as Envoy sends them (lower-case keys, raw_value, the body modes
// announced in the first message) and a body-less 200 response.
func newExchangeMsgs(bodyBytes int) exchangeMsgs {
	// A struct of strings, ints and bools: Marshal cannot fail.
	body, _ := json.Marshal(traffic.Chat("m", traffic.Filler(max(bodyBytes-96, 0)/traffic.CharsPerToken), 64, false))
	hv := func(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }
	return exchangeMsgs{
		bodyLen: len(body),
		headers: &extprocv3.ProcessingRequest{
			Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
				Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
					hv(":method", "POST"), hv(":path", "/v1/chat/completions"), hv(":authority", "gateway"),
					hv(":scheme", "http"), hv("content-type", "application/json"),
					hv("content-length", strconv.Itoa(len(body))), hv("user-agent", "bench"),
				}},
			}},
			ProtocolConfig: &extprocv3.ProtocolConfiguration{
				RequestBodyMode:  extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
				ResponseBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			},
		},
		body: &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}},
		response: &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
			ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				hv(":status", "200"), hv("content-type", "application/json"),
			}}, EndOfStream: true}}},
	}
}

// exchangeError is a failed exchange: why names its kind for the tally
// (a refusal's status, a gRPC code, a protocol surprise).
type exchangeError struct {
	why string
	err error
}

func (e *exchangeError) Error() string { return e.why + ": " + e.err.Error() }

func fail(why string, err error) error { return &exchangeError{why: why, err: err} }

// whyOf is an error's kind for the tally.
func whyOf(err error) string {
	var xe *exchangeError
	if errors.As(err, &xe) {
		return xe.why
	}
	return "other"
}

// rpcWhy names a stream error by its gRPC code.
func rpcWhy(step string, err error) error {
	if errors.Is(err, io.EOF) {
		return fail(step+": stream ended", err)
	}
	return fail(step+": "+status.Code(err).String(), err)
}

// request opens a stream and sends the request as Envoy does with
// FULL_DUPLEX_STREAMED, headers then the body in one chunk with
// end_of_stream, without waiting between them, and reads the pick: the
// request headers' answer carrying the destination header. lat is the
// decision latency, from the body's last chunk going out to the pick in.
func (e *envoy) request(ctx context.Context) (s extprocv3.ExternalProcessor_ProcessClient, lat time.Duration, err error) {
	s, err = e.client().Process(ctx)
	if err != nil {
		return nil, 0, rpcWhy("open", err)
	}
	if err := s.Send(e.msgs.headers); err != nil {
		return nil, 0, rpcWhy("send headers", err)
	}
	t0 := time.Now()
	if err := s.Send(e.msgs.body); err != nil {
		return nil, 0, rpcWhy("send body", err)
	}
	m, err := s.Recv()
	lat = time.Since(t0)
	if err != nil {
		return nil, 0, rpcWhy("pick", err)
	}
	if ir := m.GetImmediateResponse(); ir != nil {
		return nil, 0, fail(fmt.Sprintf("refused %d", ir.GetStatus().GetCode()), errors.New(string(ir.GetBody())))
	}
	rh := m.GetRequestHeaders()
	if rh == nil {
		return nil, 0, fail("pick: unexpected message", fmt.Errorf("%T", m.GetResponse()))
	}
	for _, h := range rh.GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == epp.DestinationKey && len(h.GetHeader().GetRawValue()) > 0 {
			return s, lat, nil
		}
	}
	return nil, 0, fail("pick: no destination header", errors.New("the request headers' answer sets no "+epp.DestinationKey))
}

// readEcho reads the request body coming back, up to its end_of_stream.
func (e *envoy) readEcho(s extprocv3.ExternalProcessor_ProcessClient) error {
	n := 0
	for {
		m, err := s.Recv()
		if err != nil {
			return rpcWhy("body echo", err)
		}
		sr := m.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			return fail("body echo: unexpected message", fmt.Errorf("%T", m.GetResponse()))
		}
		n += len(sr.GetBody())
		if sr.GetEndOfStream() {
			if n != e.msgs.bodyLen {
				return fail("body echo: wrong length", fmt.Errorf("%d bytes back, %d sent", n, e.msgs.bodyLen))
			}
			return nil
		}
	}
}

// finish sends the response's headers with end_of_stream (the slot's
// release), reads their answer, closes Envoy's side and expects the picker
// to end the stream.
func (e *envoy) finish(s extprocv3.ExternalProcessor_ProcessClient) error {
	if err := s.Send(e.msgs.response); err != nil {
		return rpcWhy("send response", err)
	}
	m, err := s.Recv()
	if err != nil {
		return rpcWhy("response answer", err)
	}
	if m.GetResponseHeaders() == nil {
		return fail("response answer: unexpected message", fmt.Errorf("%T", m.GetResponse()))
	}
	if err := s.CloseSend(); err != nil {
		return rpcWhy("close", err)
	}
	switch _, err := s.Recv(); {
	case err == nil:
		return fail("end: stream not ended", errors.New("a message after the exchange"))
	case !errors.Is(err, io.EOF):
		return rpcWhy("end", err)
	}
	return nil
}

// exchange is one whole decision: request and pick, echo, response, end.
func (e *envoy) exchange(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // a failed stream is reset, as Envoy resets it
	s, lat, err := e.request(ctx)
	if err != nil {
		return 0, err
	}
	if err := e.readEcho(s); err != nil {
		return 0, err
	}
	return lat, e.finish(s)
}
