package epp

import (
	"context"
	"fmt"
	"log/slog"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// The gRPC health services the endpoint-picker protocol names, besides the
// ext_proc service's own (extprocv3.ExternalProcessor_ServiceDesc.ServiceName).
const (
	// livenessService is SERVING while the server answers at all.
	livenessService = "liveness"
	// ReadinessService is SERVING while the server admits work (Ready).
	ReadinessService = "readiness"
)

// health is the gRPC health service. It computes each answer when asked
// rather than keeping statuses current with a loop: readiness is the
// Decider's Ready, which the core keeps, and the drain flag.
type health struct {
	// Watch stays Unimplemented, which the health protocol tells clients
	// to take as "use Check".
	healthpb.UnimplementedHealthServer
	s *Server
}

// Check answers liveness, readiness, the ext_proc service and "" (the
// server as a whole, which Envoy's and load balancers' probes ask for: it
// says the same as readiness); any other name is NOT_FOUND, as the health
// protocol wants.
func (h health) Check(_ context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	st, ok := h.s.serving(r.GetService())
	if !ok {
		return nil, status.Error(codes.NotFound, fmt.Sprintf("epp: unknown health service %q", r.GetService()))
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

// List answers the three named services.
func (h health) List(context.Context, *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	out := &healthpb.HealthListResponse{Statuses: map[string]*healthpb.HealthCheckResponse{}}
	for _, name := range []string{livenessService, ReadinessService, extprocv3.ExternalProcessor_ServiceDesc.ServiceName} {
		st, _ := h.s.serving(name)
		out.Statuses[name] = &healthpb.HealthCheckResponse{Status: st}
	}
	return out, nil
}

func (s *Server) serving(service string) (healthpb.HealthCheckResponse_ServingStatus, bool) {
	switch service {
	case livenessService:
		return healthpb.HealthCheckResponse_SERVING, true
	case ReadinessService, extprocv3.ExternalProcessor_ServiceDesc.ServiceName, "":
		if s.Ready() {
			return healthpb.HealthCheckResponse_SERVING, true
		}
		return healthpb.HealthCheckResponse_NOT_SERVING, true
	}
	return healthpb.HealthCheckResponse_SERVICE_UNKNOWN, false
}

// Ready reports whether the server admits new work: the Decider is Ready
// and the server is not draining.
func (s *Server) Ready() bool {
	return !s.draining.Load() && s.decider.Ready()
}

// Drain makes readiness and the ext_proc service NOT_SERVING from now on,
// so that Envoy's health checks and Kubernetes' readiness probe send new
// streams elsewhere; streams already open are served to their end, and new
// ones still are while the news spreads. Liveness stays SERVING. A drain
// cannot be undone; calling Drain again does nothing more.
func (s *Server) Drain() {
	if !s.draining.Swap(true) {
		s.log.LogAttrs(context.Background(), slog.LevelInfo, "endpoint picker draining", slog.String("state", "draining"))
	}
}

// Shutdown drains s, then stops gs, the grpc.Server s is registered on:
// gracefully (no new streams; the open ones run to their end) until ctx
// ends, then at once, which cancels the open streams and so releases their
// picks as incomplete. It returns when every Process call has returned:
// nil after a graceful stop, ctx's error after a forced one.
func (s *Server) Shutdown(ctx context.Context, gs *grpc.Server) error {
	s.Drain()
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	var err error
	select {
	case <-stopped:
	case <-ctx.Done():
		gs.Stop()
		<-stopped
		err = fmt.Errorf("epp: shutdown: %w", ctx.Err())
	}
	s.streams.Wait() // Stop does not wait for the handlers it cancels
	return err
}
