package epp

import (
	"context"
	"errors"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestHealth steps the Decider's readiness and the drain, and asks every
// service after each step, over gRPC.
func TestHealth(t *testing.T) {
	t.Parallel()
	const (
		serving    = healthpb.HealthCheckResponse_SERVING
		notServing = healthpb.HealthCheckResponse_NOT_SERVING
	)
	extProc := extprocv3.ExternalProcessor_ServiceDesc.ServiceName
	h := newHarness(t, newFakeDecider(), Options{})
	client := healthpb.NewHealthClient(h.conn)
	steps := []struct {
		name  string
		act   func()
		ready healthpb.HealthCheckResponse_ServingStatus // readiness, ext_proc and ""
	}{
		{name: "decider not ready", act: func() {}, ready: notServing},
		{name: "decider ready", act: func() { h.dec.ready.Store(true) }, ready: serving},
		{name: "decider not ready again", act: func() { h.dec.ready.Store(false) }, ready: notServing},
		{name: "ready", act: func() { h.dec.ready.Store(true) }, ready: serving},
		{name: "draining", act: h.srv.Drain, ready: notServing},
		{name: "draining twice", act: h.srv.Drain, ready: notServing},
	}
	for _, st := range steps {
		st.act()
		want := map[string]healthpb.HealthCheckResponse_ServingStatus{
			livenessService: serving, ReadinessService: st.ready, extProc: st.ready, "": st.ready}
		for service, w := range want {
			res, err := client.Check(t.Context(), &healthpb.HealthCheckRequest{Service: service})
			if err != nil || res.GetStatus() != w {
				t.Errorf("%s: Check(%q) = %v, %v; want %v", st.name, service, res.GetStatus(), err, w)
			}
		}
		list, err := client.List(t.Context(), &healthpb.HealthListRequest{})
		if err != nil || len(list.GetStatuses()) != 3 {
			t.Fatalf("%s: List() = %v, %v; want the three services", st.name, list, err)
		}
		for service, res := range list.GetStatuses() {
			if res.GetStatus() != want[service] {
				t.Errorf("%s: List()[%q] = %v, want %v", st.name, service, res.GetStatus(), want[service])
			}
		}
	}
	if _, err := client.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("Check(nope) = %v, want NotFound", err)
	}
}

// TestShutdownGraceful: Shutdown drains at once, lets an open exchange run
// to its end, then returns nil.
func TestShutdownGraceful(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFakeDecider(), Options{})
	h.dec.ready.Store(true)
	e := h.open()
	e.send(reqHeaders(true))
	e.pick("")
	result := make(chan error, 1)
	go func() { result <- h.srv.Shutdown(context.Background(), h.gs) }()
	select {
	case err := <-result:
		t.Fatalf("Shutdown() = %v with a stream open, want it to wait", err)
	default:
	}
	e.send(respHeaders(true, ":status", "200"))
	e.recv()
	e.closed()
	if err := <-result; err != nil {
		t.Errorf("Shutdown() = %v, want nil", err)
	}
	if h.srv.Ready() {
		t.Error("Ready() = true after Shutdown, want false")
	}
	if got := h.dec.end(t); !got.Complete {
		t.Errorf("released with %+v, want complete", got)
	}
	h.dec.settled(t)
}

// TestShutdownForced: when ctx ends first, Shutdown cancels the open
// streams, whose picks are released as incomplete before it returns.
func TestShutdownForced(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFakeDecider(), Options{})
	e := h.open()
	e.send(reqHeaders(true))
	e.pick("")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := h.srv.Shutdown(ctx, h.gs); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown() = %v, want context.Canceled", err)
	}
	if n := len(h.dec.ends); n != 1 {
		t.Fatalf("%d releases when Shutdown returned, want 1", n)
	}
	if got := h.dec.end(t); got.Complete {
		t.Errorf("released with %+v, want incomplete", got)
	}
	h.dec.settled(t)
}

func TestNewServer(t *testing.T) {
	if _, err := NewServer(Options{}); err == nil {
		t.Error("NewServer(no Decider) = nil error, want one naming Options.Decider")
	}
}
