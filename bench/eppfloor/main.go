// Command eppfloor is the floor under gatekeeper's endpoint picker in the
// bench: gatekeeper's own ext_proc server (epp.NewServer) over a Decider
// that admits every request to one fixed endpoint and only counts the slots
// it hands out. Driven like the picker (bench/epp), the difference between
// the two is gatekeeper's decision core and policy; what both pay (gRPC,
// HTTP/2, the protobuf messages, the exchange's buffering) is in the floor.
//
// It answers the driver like a gatekeeper admin listener: /admin/state
// counts the slots held as one upstream's in-flight, /metrics gives the Go
// heap, stack and goroutine gauges.
//
//	eppfloor -listen 127.0.0.1:18412 -admin 127.0.0.1:18413
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/gatekeeper-dev/gatekeeper/internal/epp"
)

// fixed admits everything to one endpoint and counts the slots held; safe
// for concurrent use. With spin set, each decision first spends that long
// on the CPU: a floor whose decision costs a known amount, to see how a
// decision's cost shows in the CPU per exchange (bench/README.md).
type fixed struct {
	endpoint string
	spin     time.Duration
	held     atomic.Int64
}

func (f *fixed) Decide(context.Context, *epp.Request) (*epp.Pick, *epp.Refusal) {
	for start := time.Now(); time.Since(start) < f.spin; {
	}
	f.held.Add(1)
	return &epp.Pick{Endpoints: []string{f.endpoint}, Done: func(epp.End) { f.held.Add(-1) }}, nil
}

// MaxBodyBytes is gatekeeper's default server.max_body_bytes, so both
// buffer the same bodies.
func (f *fixed) MaxBodyBytes() int64 { return 10 << 20 }

func (f *fixed) Ready() bool { return true }

func main() {
	listen := flag.String("listen", "127.0.0.1:18412", "ext_proc gRPC address (plaintext HTTP/2)")
	adminAddr := flag.String("admin", "127.0.0.1:18413", "address of /admin/state and /metrics")
	endpoint := flag.String("endpoint", "127.0.0.1:18000", "the endpoint every pick names")
	spin := flag.Duration("spin", 0, "spend this long on the CPU in each decision (0: none)")
	flag.Parse()
	dec := &fixed{endpoint: *endpoint, spin: *spin}
	srv, err := epp.NewServer(epp.Options{Decider: dec})
	if err != nil {
		log.Fatal(err)
	}
	// The same server options as gatekeeper's picker (cmd/gatekeeper/picker.go).
	gs := grpc.NewServer(epp.ServerOptions()...)
	srv.Register(gs)
	admin := http.NewServeMux()
	admin.HandleFunc("/admin/state", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"queue":{"length":0},"upstreams":[{"inflight":%d}]}`, dec.held.Load())
	})
	admin.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		fmt.Fprintf(w, "go_memstats_heap_inuse_bytes %d\ngo_memstats_stack_inuse_bytes %d\ngo_goroutines %d\n",
			m.HeapInuse, m.StackInuse, runtime.NumGoroutine())
	})
	go func() {
		log.Fatal((&http.Server{Addr: *adminAddr, Handler: admin, ReadHeaderTimeout: 10 * time.Second}).ListenAndServe())
	}()
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(gs.Serve(lis))
}
