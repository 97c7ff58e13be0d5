package epp_test

import (
	"context"
	"fmt"
	"net"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/test/bufconn"

	"github.com/gatekeeper-dev/gatekeeper/internal/epp"
)

// onePod is a Decider that sends every request to one pod.
type onePod struct{}

func (onePod) Decide(context.Context, *epp.Request) (*epp.Pick, *epp.Refusal) {
	return &epp.Pick{Endpoints: []string{"10.0.0.7:8000"}, Done: func(e epp.End) {
		fmt.Println("released, complete:", e.Complete, "status:", e.Status)
	}}, nil
}
func (onePod) MaxBodyBytes() int64 { return 1 << 20 }
func (onePod) Ready() bool         { return true }

// The server answers a body-less request's headers with the pick, and the
// response's end releases it. Here a test client plays Envoy's part.
func ExampleServer() {
	srv, err := epp.NewServer(epp.Options{Decider: onePod{}})
	if err != nil {
		panic(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	lis := bufconn.Listen(1 << 16)
	go gs.Serve(lis)
	defer gs.Stop()
	conn, err := grpc.NewClient("passthrough:///epp", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		panic(err)
	}
	defer conn.Close()

	ctx := context.Background()
	ready, _ := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: epp.ReadinessService})
	fmt.Println("readiness:", ready.GetStatus())

	stream, _ := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{EndOfStream: true, Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":method", RawValue: []byte("GET")}, {Key: ":path", RawValue: []byte("/v1/models")}}}}}})
	m, _ := stream.Recv()
	for _, h := range m.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		fmt.Println(h.GetHeader().GetKey()+":", string(h.GetHeader().GetRawValue()))
	}
	stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{EndOfStream: true, Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":status", RawValue: []byte("200")}}}}}})
	stream.Recv()
	stream.CloseSend()
	stream.Recv() // the stream's end: the server has released the pick
	// Output:
	// readiness: SERVING
	// x-gateway-destination-endpoint: 10.0.0.7:8000
	// released, complete: true status: 200
}
