// Command proxyfloor is a reverse proxy with no policy at all, in front of
// bench/upstream: what an HTTP core alone allows at saturation on the
// machine bench/run runs on (issue 38), beside gatekeeper (the same core
// with the policy) and nginx. Each -core is the least that core does to
// relay a request:
//
//   - net/http: http.Server with httputil.ReverseProxy over http.Transport.
//   - podconn: the same over gatekeeper's own pod transport
//     (internal/proxy/podconn), which runs each exchange on the handler's
//     goroutine: the core gatekeeper's traffic listener is built on.
//   - h1: an HTTP/1.1 server of the least possible kind on net/http's own
//     parser (http.ReadRequest), with the same ReverseProxy over podconn:
//     an upper bound for replacing net/http's server alone (see h1.go).
//   - handoff: the podconn core, but an HTTP/1.1 token stream leaves
//     net/http's serving goroutine once its headers are out (hijacked, and
//     relayed by one goroutine of its own): an upper bound for that
//     choice's memory per open stream (see handoff.go).
//   - rplean: the podconn core's server and ReverseProxy over a pod
//     transport that writes the request and parses the answer's head by
//     hand (leanTransport): an upper bound for a cheaper pod transport.
//   - netlean: net/http's server in front of a forwarder of its own, no
//     ReverseProxy and no http.Response (see lean.go): an upper bound for
//     replacing both on the answer's path while net/http's server stays.
//   - lean, leanwatch: the same forwarder behind h1's server; leanwatch
//     adds the per-request read that detects a client gone, as net/http's
//     server makes (lean has none, so it is no server a client could use).
//   - leancore: leanwatch with gatekeeper's decision core (decide.Core:
//     classification, admission, Finish) around each forward, the policy
//     read from -policy (see leancore.go): what that decision costs on a
//     front of gatekeeper's own, less what gatekeeper adds around it.
//   - fasthttp: github.com/valyala/fasthttp's server and HostClient. It
//     buffers each response whole (no streaming, no HTTP/2), so it is an
//     upper bound for a Go core other than net/http, not a drop-in one.
//
// Usage:
//
//	proxyfloor -core net/http -listen 127.0.0.1:18780 -upstream http://127.0.0.1:18000
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	_ "net/http/pprof"
	"net/url"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/proxy/podconn"
)

func main() {
	core := flag.String("core", "net/http", "net/http, podconn, h1, handoff, rplean, netlean, lean, leanwatch, leancore or fasthttp")
	listen := flag.String("listen", "127.0.0.1:18780", "traffic address")
	upstream := flag.String("upstream", "http://127.0.0.1:18000", "upstream base URL")
	pprofAddr := flag.String("pprof", "", "serve net/http/pprof on this address (profiling a core)")
	policyPath := flag.String("policy", "", "leancore: the gatekeeper policy file whose per-request keys its decision core takes (bench/run's gatekeeper.yaml)")
	flag.Parse()
	if *pprofAddr != "" {
		go func() { log.Println(http.ListenAndServe(*pprofAddr, nil)) }()
	}
	u, err := url.Parse(*upstream)
	if err != nil || u.Host == "" {
		log.Fatalf("proxyfloor: bad -upstream %q", *upstream)
	}
	switch *core {
	case "net/http":
		tr := &http.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute, DisableCompression: true}
		log.Fatal(netHTTP(*listen, u, tr))
	case "podconn":
		log.Fatal(netHTTP(*listen, u, &podconn.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute}))
	case "h1":
		log.Fatal(h1Serve(*listen, reverse(u, &podconn.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute})))
	case "handoff":
		log.Fatal(handoffServe(*listen, u, &podconn.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute}))
	case "rplean":
		log.Fatal(netHTTP(*listen, u, leanTransport{&leanPods{addr: u.Host}}))
	case "netlean":
		log.Fatal(netLeanServer(*listen, u.Host).ListenAndServe())
	case "lean", "leanwatch":
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			log.Fatal(err)
		}
		log.Fatal(leanServe(ln, u.Host, *core == "leanwatch"))
	case "leancore":
		cfg, err := config.LoadFile(*policyPath)
		if err != nil {
			log.Fatal(err)
		}
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			log.Fatal(err)
		}
		log.Fatal(leanCoreServe(ln, u.Host, cfg, 4096))
	case "fasthttp":
		log.Fatal(fastHTTP(*listen, u.Host))
	default:
		log.Fatalf("proxyfloor: unknown -core %q (net/http, podconn, h1, handoff, rplean, netlean, lean, leanwatch, leancore or fasthttp)", *core)
	}
}

// netHTTP serves the ReverseProxy gatekeeper uses over tr, whose settings
// are those bench/run gives gatekeeper (1 024 idle connections), with
// pooled copy buffers as gatekeeper's (without a BufferPool ReverseProxy
// allocates 32 KiB per response, which no competent proxy would ship).
func netHTTP(listen string, u *url.URL, tr http.RoundTripper) error {
	srv := &http.Server{Addr: listen, Handler: reverse(u, tr), ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}

func reverse(u *url.URL, tr http.RoundTripper) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, Transport: tr,
		BufferPool: &buffers{}}
}

// buffers is a sync.Pool of ReverseProxy's 32 KiB copy buffers; it pools
// pointers to arrays, so that Put allocates nothing.
type buffers struct{ p sync.Pool }

func (b *buffers) Get() []byte {
	if a, ok := b.p.Get().(*[32 << 10]byte); ok {
		return a[:]
	}
	return new([32 << 10]byte)[:]
}

func (b *buffers) Put(buf []byte) {
	if len(buf) == 32<<10 {
		b.p.Put((*[32 << 10]byte)(buf))
	}
}

// fastHTTP relays each request as it came to the upstream and its answer
// back.
func fastHTTP(listen, host string) error {
	hc := &fasthttp.HostClient{Addr: host, MaxConns: 4096, MaxIdleConnDuration: time.Minute}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if err := hc.Do(&ctx.Request, &ctx.Response); err != nil {
			ctx.Error(err.Error(), fasthttp.StatusBadGateway)
		}
	}}
	return srv.ListenAndServe(listen)
}
