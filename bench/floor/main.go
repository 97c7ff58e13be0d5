// Command floor is what net/http alone costs per waiting request, the floor
// under gatekeeper's figure in the queue scenario (issue 16): a plain
// http.Server whose handler reads the body and then blocks until the client
// leaves. It answers the driver's queue measurement like a queue gatekeeper:
// /admin/state counts the first held request as in flight and the others as
// queued, and /metrics gives the Go heap, stack and goroutine gauges.
//
//	floor -listen 127.0.0.1:18480 -admin 127.0.0.1:18490
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18480", "traffic address")
	adminAddr := flag.String("admin", "127.0.0.1:18490", "address of /admin/state and /metrics")
	flag.Parse()
	var held atomic.Int64
	traffic := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			return // bench/run's readiness probe
		}
		_, _ = io.Copy(io.Discard, r.Body)
		held.Add(1)
		defer held.Add(-1)
		<-r.Context().Done()
	})
	admin := http.NewServeMux()
	admin.HandleFunc("/admin/state", func(w http.ResponseWriter, r *http.Request) {
		n := held.Load()
		fmt.Fprintf(w, `{"queue":{"length":%d},"upstreams":[{"inflight":%d}]}`, max(n-1, 0), min(n, 1))
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
	log.Fatal((&http.Server{Addr: *listen, Handler: traffic, ReadHeaderTimeout: 10 * time.Second}).ListenAndServe())
}
