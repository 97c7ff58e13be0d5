package epp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"
)

// harness runs a Server on a real gRPC connection (in memory) and plays
// Envoy's side of its streams.
type harness struct {
	t    *testing.T
	dec  *fakeDecider
	srv  *Server
	gs   *grpc.Server
	conn *grpc.ClientConn
}

func newHarness(t *testing.T, dec *fakeDecider, o Options) *harness {
	t.Helper()
	h := serveDecider(t, dec, o)
	h.dec = dec
	return h
}

// serveDecider is newHarness over any Decider (the real core's too).
func serveDecider(t *testing.T, dec Decider, o Options) *harness {
	t.Helper()
	o.Decider = dec
	srv, err := NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	srv.Register(gs)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis) // returns at Stop
	}()
	conn, err := grpc.NewClient("passthrough:///epp",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		<-served
	})
	return &harness{t: t, srv: srv, gs: gs, conn: conn}
}

// envoy is one ext_proc stream, seen from Envoy's side.
type envoy struct {
	t      *testing.T
	stream extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc // resets the stream, as Envoy does when the client leaves
	scores map[string]float64 // the last pick's ScoresKey metadata; nil without
}

func (h *harness) open() *envoy {
	h.t.Helper()
	return h.openWith(nil)
}

// openWith opens a stream whose gRPC request carries md as its metadata,
// as Envoy sends its trace context.
func (h *harness) openWith(md grpcmd.MD) *envoy {
	h.t.Helper()
	ctx, cancel := context.WithCancel(h.t.Context())
	h.t.Cleanup(cancel)
	if md != nil {
		ctx = grpcmd.NewOutgoingContext(ctx, md)
	}
	stream, err := extprocv3.NewExternalProcessorClient(h.conn).Process(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return &envoy{t: h.t, stream: stream, cancel: cancel}
}

// send sends messages without waiting for answers, as Envoy does. A
// stream the server has ended takes no more (gRPC's Send says io.EOF; Recv
// tells the rest).
func (e *envoy) send(ms ...*extprocv3.ProcessingRequest) {
	e.t.Helper()
	for _, m := range ms {
		if err := e.stream.Send(m); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			e.t.Fatalf("Send: %v", err)
		}
	}
}

func (e *envoy) recv() *extprocv3.ProcessingResponse {
	e.t.Helper()
	m, err := e.stream.Recv()
	if err != nil {
		e.t.Fatalf("Recv: %v", err)
	}
	return m
}

// closed half-closes the stream and expects the server to end it with
// nothing more to say.
func (e *envoy) closed() {
	e.t.Helper()
	if err := e.stream.CloseSend(); err != nil {
		e.t.Fatal(err)
	}
	e.ended()
}

// ended expects the server to have ended the stream, cleanly, with no
// message left.
func (e *envoy) ended() {
	e.t.Helper()
	if m, err := e.stream.Recv(); !errors.Is(err, io.EOF) {
		e.t.Fatalf("Recv() = %v, %v; want the stream's end", m, err)
	}
}

// body reads body messages of side until one with end_of_stream (or, with
// !eos, until want bytes came), checking each against the chunk limit.
func (e *envoy) body(s side, want int, eos bool) []byte {
	e.t.Helper()
	var got []byte
	for {
		m := e.recv()
		var br *extprocv3.BodyResponse
		if s == requestSide {
			br = m.GetRequestBody()
		} else {
			br = m.GetResponseBody()
		}
		sr := br.GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			e.t.Fatalf("got %v, want a streamed body response", m)
		}
		if len(sr.GetBody()) > chunkLimit {
			e.t.Fatalf("a body chunk of %d bytes, want at most %d", len(sr.GetBody()), chunkLimit)
		}
		got = append(got, sr.GetBody()...)
		last := len(got) >= want
		if sr.GetEndOfStream() != (eos && last) || len(got) > want {
			e.t.Fatalf("after %d of %d bytes end_of_stream = %v, want %v", len(got), want, sr.GetEndOfStream(), eos && last)
		}
		if last {
			return got
		}
	}
}

// pick reads the answer to the request headers and returns its endpoint
// list, checking that the header and the metadata agree, that the list
// names distinct ip:port endpoints, what Content-Length it sets ("" for
// none), and that the scores, if any, are numbers by ip:port that score
// the first endpoint (kept in e.scores).
func (e *envoy) pick(wantLength string) string {
	e.t.Helper()
	m := e.recv()
	cr := m.GetRequestHeaders().GetResponse()
	if cr == nil {
		e.t.Fatalf("got %v, want a request headers response", m)
	}
	if !cr.GetClearRouteCache() {
		e.t.Error("clear_route_cache = false, want true")
	}
	set := map[string]string{}
	for _, o := range cr.GetHeaderMutation().GetSetHeaders() {
		if o.GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
			e.t.Errorf("header %s: append_action %v, want OVERWRITE_IF_EXISTS_OR_ADD", o.GetHeader().GetKey(), o.GetAppendAction())
		}
		set[o.GetHeader().GetKey()] = string(o.GetHeader().GetRawValue())
	}
	if got := set["content-length"]; got != wantLength {
		e.t.Errorf("content-length set to %q, want %q", got, wantLength)
	}
	list := set[DestinationKey]
	md := m.GetDynamicMetadata().GetFields()[metadataNamespace].GetStructValue().GetFields()[DestinationKey].GetStringValue()
	if list == "" || md != list {
		e.t.Errorf("%s header %q, metadata %s.%s %q; want the same list", DestinationKey, list, metadataNamespace, DestinationKey, md)
	}
	endpoints := strings.Split(list, ",")
	for i, ep := range endpoints {
		if _, _, err := net.SplitHostPort(ep); err != nil || slices.Contains(endpoints[:i], ep) {
			e.t.Errorf("%s %q: endpoint %q is not a distinct ip:port", DestinationKey, list, ep)
		}
	}
	e.scores = readScores(e.t, m, endpoints[0])
	return list
}

// readScores reads the ScoresKey metadata of a pick, checking its shape:
// a struct of numbers by ip:port, the first endpoint among them. Nil when
// the pick has none.
func readScores(t *testing.T, m *extprocv3.ProcessingResponse, first string) map[string]float64 {
	t.Helper()
	v, ok := m.GetDynamicMetadata().GetFields()[metadataNamespace].GetStructValue().GetFields()[ScoresKey]
	if !ok {
		return nil
	}
	fields := v.GetStructValue().GetFields()
	scores := make(map[string]float64, len(fields))
	for ep, f := range fields {
		_, isNumber := f.GetKind().(*structpb.Value_NumberValue)
		if _, _, err := net.SplitHostPort(ep); err != nil || !isNumber {
			t.Errorf("%s: %q: %v, want a number by ip:port", ScoresKey, ep, f)
		}
		scores[ep] = f.GetNumberValue()
	}
	if _, ok := scores[first]; !ok {
		t.Errorf("%s %v has no score for the pick %s", ScoresKey, scores, first)
	}
	return scores
}

// refused reads an immediate response.
func (e *envoy) refused() *extprocv3.ImmediateResponse {
	e.t.Helper()
	m := e.recv()
	ir := m.GetImmediateResponse()
	if ir == nil {
		e.t.Fatalf("got %v, want an immediate response", m)
	}
	return ir
}

// header is a header of an immediate response.
func header(ir *extprocv3.ImmediateResponse, key string) string {
	for _, o := range ir.GetHeaders().GetSetHeaders() {
		if strings.EqualFold(o.GetHeader().GetKey(), key) {
			return string(o.GetHeader().GetRawValue())
		}
	}
	return ""
}

// Envoy's messages. kv are header pairs; a key ending in "=v" is sent in
// value rather than raw_value, as older Envoy configurations do.
func headers(kv ...string) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		if k, ok := bytes.CutSuffix([]byte(kv[i]), []byte("=v")); ok {
			hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: string(k), Value: kv[i+1]})
			continue
		}
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return hm
}

func reqHeaders(eos bool, kv ...string) *extprocv3.ProcessingRequest {
	kv = append([]string{":method", "POST", ":path", "/v1/chat/completions", ":authority", "gw.example"}, kv...)
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headers(kv...), EndOfStream: eos}}}
}

func reqBody(data string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(data), EndOfStream: eos}}}
}

func respHeaders(eos bool, kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: headers(kv...), EndOfStream: eos}}}
}

func respBody(data string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(data), EndOfStream: eos}}}
}

func reqTrailers() *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
		RequestTrailers: &extprocv3.HttpTrailers{Trailers: headers("x-checksum", "1")}}}
}

func respTrailers() *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
		ResponseTrailers: &extprocv3.HttpTrailers{Trailers: headers("grpc-status", "0")}}}
}

// withMetadata adds a namespace's fields to m's metadata_context.
func withMetadata(m *extprocv3.ProcessingRequest, namespace string, fields map[string]any) *extprocv3.ProcessingRequest {
	s, err := structpb.NewStruct(fields)
	if err != nil {
		panic(err) // a test's own literal
	}
	if m.MetadataContext == nil {
		m.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
	}
	m.MetadataContext.FilterMetadata[namespace] = s
	return m
}

// served is Envoy's report of the endpoint that served the response.
func served(m *extprocv3.ProcessingRequest, endpoint string) *extprocv3.ProcessingRequest {
	return withMetadata(m, metadataNamespace, map[string]any{servedKey: endpoint})
}

// subset is Envoy's subset hint, a list of endpoints.
func subset(m *extprocv3.ProcessingRequest, endpoints ...string) *extprocv3.ProcessingRequest {
	list := make([]any, len(endpoints))
	for i, ep := range endpoints {
		list[i] = ep
	}
	return withMetadata(m, subsetNamespace, map[string]any{subsetKey: list})
}
