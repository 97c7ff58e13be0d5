package epp

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"
	"testing"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/route"
)

// floorBlock is how many exchanges run against one target before the
// other takes its turn in BenchmarkPickerBesideFloor.
const floorBlock = 32

// BenchmarkPickerBesideFloor runs the bench's two endpoint pickers in one
// process, each behind its own gRPC server on TCP loopback and reached by
// its own client, the exchange bench/run's driver plays with the headers
// Envoy passes on (envoyExchange): the floor (the
// server over staticDecider, the no-op decision bench/eppfloor makes) and
// the picker (the server over the decision core: four pods with room, no
// limits, no recorder). They alternate in blocks of floorBlock exchanges,
// so that whatever else runs on the machine falls on both alike. Per
// exchange, for each: allocations and bytes (runtime.MemStats), the
// process's CPU (getrusage: utime + stime), and the picker's ÷ the floor's.
// Everything is the whole process's, the client's share (the same for
// both) included, so the ratios understate what the picker adds to a
// server alone.
func BenchmarkPickerBesideFloor(b *testing.B) {
	targets := [2]extprocv3.ExternalProcessorClient{
		benchClient(b, staticDecider{}),
		benchClient(b, benchCore(b, 4)),
	}
	in, resp := envoyExchange()
	var total [2]usageSample
	for b.Loop() {
		for i, c := range targets {
			before := sampleUsage()
			for range floorBlock {
				if err := exchangeOnce(b.Context(), c, in, resp); err != nil {
					b.Fatal(err)
				}
			}
			total[i] = total[i].add(sampleUsage().sub(before))
		}
	}
	n := float64(b.N * floorBlock)
	floor, picker := total[0], total[1]
	b.ReportMetric(float64(floor.allocs)/n, "floor-allocs/x")
	b.ReportMetric(float64(picker.allocs)/n, "picker-allocs/x")
	b.ReportMetric(float64(picker.allocs)/float64(floor.allocs), "allocs-ratio")
	b.ReportMetric(float64(floor.bytes)/n, "floor-B/x")
	b.ReportMetric(float64(picker.bytes)/n, "picker-B/x")
	b.ReportMetric(float64(floor.cpu.Microseconds())/n, "floor-cpu-µs/x")
	b.ReportMetric(float64(picker.cpu.Microseconds())/n, "picker-cpu-µs/x")
	b.ReportMetric(float64(picker.cpu)/float64(floor.cpu), "cpu-ratio")
}

// envoyExchange is one exchange as Envoy plays it, in the body modes
// bench/run's driver announces: the request headers of an OpenAI client's
// chat request with those Envoy adds, the body in one chunk; then the
// response headers of a JSON answer with end_of_stream.
func envoyExchange() (in []*extprocv3.ProcessingRequest, resp *extprocv3.ProcessingRequest) {
	h := reqHeaders(false, ":scheme", "http", "content-type", "application/json",
		"content-length", strconv.Itoa(len(chatBody)), "accept", "application/json", "user-agent", "OpenAI/Python 1.99.0",
		"authorization", "Bearer sk-bench-0123456789abcdef", "x-forwarded-proto", "http",
		"x-request-id", "3f1c9a52-7b7e-4d1e-9a57-0c8f1d2e6b4a", "x-envoy-expected-rq-timeout-ms", "600000")
	full := extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	h.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: full, ResponseBodyMode: full}
	resp = respHeaders(true, ":status", "200", "content-type", "application/json", "content-length", "412",
		"date", "Sun, 06 Dec 2026 19:00:00 GMT", "server", "uvicorn", "x-envoy-upstream-service-time", "12")
	return []*extprocv3.ProcessingRequest{h, reqBody(chatBody, true)}, resp
}

// usageSample is what the process has used so far: heap allocations, their
// bytes, and CPU time.
type usageSample struct {
	allocs, bytes uint64
	cpu           time.Duration
}

func sampleUsage() usageSample {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return usageSample{allocs: m.Mallocs, bytes: m.TotalAlloc, cpu: cpu}
}

func (u usageSample) sub(v usageSample) usageSample {
	return usageSample{allocs: u.allocs - v.allocs, bytes: u.bytes - v.bytes, cpu: u.cpu - v.cpu}
}

func (u usageSample) add(v usageSample) usageSample {
	return usageSample{allocs: u.allocs + v.allocs, bytes: u.bytes + v.bytes, cpu: u.cpu + v.cpu}
}

// benchClient serves dec on a gRPC server with the picker's options
// (ServerOptions) over TCP loopback, stopped at the benchmark's end, and
// returns a client of it.
func benchClient(b *testing.B, dec Decider) extprocv3.ExternalProcessorClient {
	srv, err := NewServer(Options{Decider: dec})
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer(ServerOptions()...)
	srv.Register(gs)
	served := make(chan struct{})
	// The server's goroutines carry the Decider's type as the profile
	// label "decider" (gRPC starts each connection's and stream's from
	// Serve's): go tool pprof -tagfocus decider=... splits the servers.
	labels := pprof.Labels("decider", fmt.Sprintf("%T", dec))
	go pprof.Do(context.Background(), labels, func(context.Context) {
		defer close(served)
		_ = gs.Serve(lis)
	})
	b.Cleanup(func() {
		gs.Stop()
		<-served
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return extprocv3.NewExternalProcessorClient(conn)
}

// benchCore is the Decider over the decision core as the bench's
// gatekeeper runs it: n pods (10.0.0.1:8000, …) with a window of 16384
// each, no rate limits, and pod scoring with the default routing weights
// (prefix 3, load 2, KV cache 2, memory 2: each request's prefix blocks
// hashed and the pods scored for it).
func benchCore(b *testing.B, n int) Decider {
	q, err := queue.New(queue.Settings{})
	if err != nil {
		b.Fatal(err)
	}
	reg := pods.New(&levels{critical: map[string]bool{}})
	var ps []pods.Pod
	for i := range n {
		name := "pod-" + strconv.Itoa(i)
		u, _ := url.Parse("http://10.0.0." + strconv.Itoa(i+1) + ":8000")
		ps = append(ps, pods.Pod{Name: name, URL: u})
		q.SetWindow(name, 16384)
	}
	reg.Set(ps)
	q.SetAvailability(reg.Availability)
	router, err := route.New(route.Settings{Weights: route.Weights{Prefix: 3, Load: 2, KV: 2, Memory: 2}})
	if err != nil {
		b.Fatal(err)
	}
	q.SetScorer(router)
	lim, err := breaker.NewLimiter(breaker.LimiterSettings{})
	if err != nil {
		b.Fatal(err)
	}
	core, err := decide.New(decide.Options{Registry: reg, Admission: decide.Queue(q), Limiter: lim,
		Policy: decide.Policy{Prefix: true}})
	if err != nil {
		b.Fatal(err)
	}
	return NewCoreDecider(CoreOptions{Core: core})
}
