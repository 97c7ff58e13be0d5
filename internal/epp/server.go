package epp

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

// Options configures a Server. Decider is required; for every other field
// the zero value selects the default.
type Options struct {
	// Decider admits or refuses each request and owns the slots it hands
	// out. Required.
	Decider Decider
	// Logger receives the server's lines: per-request lines at Debug, the
	// drain at Info. Nil discards them.
	Logger *slog.Logger
	// Now returns the current time, for End.Duration. Nil means time.Now.
	Now func() time.Time
	// Recorder, if set, counts the answers the server gives itself (a
	// message that breaks the protocol, body modes it cannot serve, a
	// Decider that broke its contract) by their reason (Rejected), as the
	// Decider counts its refusals. Nil counts none.
	Recorder Recorder
	// TracerProvider, if set, makes a server span per request, from its
	// headers to the response's end of stream (or the exchange's other
	// end), handed to the Decider in Decide's ctx, and sets the span's
	// trace context on the request to the pod. Nil traces nothing and
	// costs one nil check per request.
	TracerProvider trace.TracerProvider
	// Propagator reads trace context from the stream's gRPC metadata and
	// the request headers, and writes it on the pick; nil means W3C
	// traceparent and tracestate.
	Propagator propagation.TextMapPropagator
	// TrustClientContext makes the traceparent among the request headers
	// (the client's, which Envoy passes on) the parent of the server span
	// when Envoy sent none of its own in the stream's metadata; false
	// makes it a link. Envoy's own context is always the parent.
	TrustClientContext bool
}

// Server is gatekeeper's endpoint picker: Envoy's ext_proc service
// (ExternalProcessor) over a Decider, and the gRPC health service that
// Envoy and Kubernetes probe. Create one with NewServer and Register it on
// a grpc.Server. It is safe for concurrent use (gRPC runs each stream's
// Process on its own goroutine) and must not be copied.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	decider  Decider
	tracing  *tracing // nil: no spans
	log      *slog.Logger
	now      func() time.Time
	rec      Recorder // nil: counts nothing
	draining atomic.Bool
	streams  sync.WaitGroup // the Process calls under way, for Shutdown
}

// NewServer returns a Server for o, or an error naming the field that is
// missing.
func NewServer(o Options) (*Server, error) {
	if o.Decider == nil {
		return nil, errors.New("epp: Options.Decider: required")
	}
	s := &Server{decider: o.Decider, tracing: newTracing(o), log: o.Logger, now: o.Now, rec: o.Recorder}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// Flow-control windows of ServerOptions.
const (
	streamWindow = 1 << 20  // 1 MiB: a chat body many times over
	connWindow   = 16 << 20 // 16 MiB: gRPC's own ceiling for the windows it sizes itself
)

// ServerOptions are the options of the gRPC server the picker serves on
// (cmd/gatekeeper; bench/eppfloor runs its floor with the same):
//   - Envoy keeps one HTTP/2 connection per worker and multiplexes a
//     stream per request: no cap on streams (Envoy's circuit breaker is
//     the cap), and its keepalive pings are welcome.
//   - Fixed flow-control windows (streamWindow, connWindow) rather than
//     gRPC's own sizing, which sends a ping to measure the link whenever
//     data arrives and no measurement is under way: about one per
//     exchange at the picker's traffic, each a write to Envoy and its ack
//     to read, for windows that would stay at their 64 KiB start for
//     such small messages (BenchmarkPickerBesideFloor; bench/README.md).
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
	}
}

// Register registers s on gs as the ext_proc service and as the gRPC health
// service (see Check). Call it once, before gs serves.
func (s *Server) Register(gs *grpc.Server) {
	extprocv3.RegisterExternalProcessorServer(gs, s)
	healthpb.RegisterHealthServer(gs, health{s: s})
}

// RegisterHealth registers only the health service on gs: a second,
// plaintext listener for kubelet's gRPC probes, which speak no TLS.
func (s *Server) RegisterHealth(gs *grpc.Server) {
	healthpb.RegisterHealthServer(gs, health{s: s})
}

// Process serves one ext_proc stream, message by message. Envoy opens one
// stream per HTTP request; a stream that carries a second request releases
// the first as incomplete and serves the second. Whatever the stream's end,
// a pick it holds is released exactly once before Process returns.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	s.streams.Add(1)
	defer s.streams.Done()
	x := newExchange(s, stream)
	defer x.abandon()
	// One message is decoded into, again and again: gRPC's proto codec
	// resets it first (proto.Unmarshal: "The default behavior is to always
	// reset the message before unmarshaling"), replacing its fields rather
	// than writing into them, so what the exchange kept or sent of an
	// earlier message (strings, body bytes) is never changed; and this
	// server sets no stats handler, the one part of gRPC that sees a
	// received message after RecvMsg returns.
	m := new(extprocv3.ProcessingRequest)
	for {
		if err := stream.RecvMsg(m); err != nil {
			return x.ended(err)
		}
		end, err := x.handle(m)
		if err != nil || end {
			return err
		}
	}
}
