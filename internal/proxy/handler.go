package proxy

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync/atomic"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/proxy/framing"
	"github.com/gatekeeper-dev/gatekeeper/internal/proxy/podconn"
)

// Handler is the traffic listener's http.Handler. Create one with New; it is
// safe for concurrent use and must not be copied.
type Handler struct {
	opts    Options
	log     *slog.Logger
	now     func() time.Time
	metrics *Metrics
	core    *decide.Core
	reg     *pods.Registry
	rp      *httputil.ReverseProxy // 32 KiB copy buffers
	// rpStream forwards requests that ask for a stream; it is rp with 2 KiB
	// copy buffers.
	rpStream *httputil.ReverseProxy
	ids      *idSource
	linger   lingering // what a refused body may still send
	tracing  *tracing  // nil: no spans
	// sender is the transport, when it says whether it reads a request's
	// body after RoundTrip (heldBody.release); nil when it does not say.
	sender bodySender
	// handoffs are the streams relayed off net/http's goroutine, for
	// shutdown (WaitStreams).
	handoffs handoffs
	// server serves a handed-off stream's connection again after the
	// stream (ReturnConnsTo); nil: it closes.
	server atomic.Pointer[http.Server]

	// ready is the HTTP front's own part of /readyz: false until New has
	// built the handler. The rest of readiness, and the drain, are the
	// core's (decide.Core.Unready, StartDrain, Drain).
	ready atomic.Bool
}

// New builds a Handler from opts.
func New(opts Options) (*Handler, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	h := &Handler{opts: opts, log: opts.Logger, now: opts.Now, metrics: opts.Metrics}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.now == nil {
		h.now = time.Now
	}
	h.core, h.reg = opts.Core, opts.Core.Registry()
	h.ids = newIDSource()
	h.linger = defaultLingering()
	h.tracing = newTracing(opts)
	rt := opts.RoundTripper
	if rt == nil {
		rt = NewTransport(opts.Transport)
	}
	h.sender, _ = rt.(bodySender)
	h.rp = h.newReverseProxy(rt, &bufferPool{})
	h.rpStream = h.newReverseProxy(rt, &streamBufferPool{})
	h.ready.Store(true)
	return h, nil
}

// ServeHTTP implements http.Handler. Only health endpoints and the
// inference allow-list exist: GET /healthz and GET /readyz are answered
// here, every other request goes to serveTraffic, where the core's routes
// decide (vLLM's admin routes are 404 there without touching a pod). The
// two paths need no router: chi's would copy every request and add a
// context to it (two allocations a request, kept for a stream's life) and
// three frames to the stack a stream holds.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.core.Draining() {
		// Close each connection after its response, so clients stop reusing
		// connections before shutdown. (http.Server.SetKeepAlivesEnabled
		// would also close idle connections at once, racing requests that
		// clients are just sending on them.)
		w.Header().Set("Connection", "close")
	}
	if framing.Ambiguous(r.Context()) {
		w.Header().Set("Connection", "close") // what follows on this connection is suspect
		h.serveAmbiguous(w, r)
		return
	}
	if r.Method == "PRI" && r.ProtoMajor == 2 { // HTTP/2's preface, on a listener without h2c
		h.serveNoH2C(w, r)
		return
	}
	switch {
	case r.Method != http.MethodGet:
		h.serveTraffic(w, r)
	case healthPath(r, "/healthz"):
		h.serveHealthz(w, r)
	case healthPath(r, "/readyz"):
		h.serveReadyz(w, r)
	default:
		h.serveTraffic(w, r)
	}
}

// healthPath reports whether r's path is path, as it came (escaped): a
// router matches the raw path when the request has one.
func healthPath(r *http.Request, path string) bool {
	if r.URL.RawPath != "" {
		return r.URL.RawPath == path
	}
	return r.URL.Path == path
}

// Metrics returns the handler's metrics (nil if it records none).
func (h *Handler) Metrics() *Metrics { return h.metrics }

// Ready reports what /readyz answers: the handler is built and the core is
// ready (decide.Core.Unready: not draining, some pod can take work, the
// cluster condition).
func (h *Handler) Ready() bool {
	return h.ready.Load() && h.core.Unready() == ""
}

func (h *Handler) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

func (h *Handler) serveReadyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var why string
	switch {
	case h.core.Draining(): // before "starting", as the core orders its own reasons
		why = "draining"
	case !h.ready.Load():
		why = "starting"
	default:
		why = h.core.Unready()
	}
	if why != "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(why + "\n"))
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// NewTransport builds the pooled transport to the pods: the handler's
// (Options.Transport), and the one cmd hands the pods' health check. It is
// a podconn.Transport, which runs each exchange on the caller's goroutine
// (issue 38: no read and write goroutines per pod connection), with an
// http.Transport built from the same settings behind it for what podconn
// hands on (https pods, upgrades, Expect: 100-continue).
func NewTransport(s TransportSettings) *podconn.Transport {
	perHost := s.MaxIdleConnsPerHost
	if perHost <= 0 {
		perHost = 256
	}
	d := &net.Dialer{Timeout: orDefault(s.DialTimeout, 2*time.Second), KeepAlive: 30 * time.Second}
	return &podconn.Transport{
		DialContext:           d.DialContext,
		ResponseHeaderTimeout: orDefault(s.ResponseHeaderTimeout, 10*time.Minute),
		IdleConnTimeout:       orDefault(s.IdleConnTimeout, 4*time.Second),
		MaxIdleConnsPerHost:   perHost,
		Fallback:              newHTTPTransport(s, d, perHost),
	}
}

// newHTTPTransport is the http.Transport behind NewTransport's podconn.
func newHTTPTransport(s TransportSettings, d *net.Dialer, perHost int) *http.Transport {
	return &http.Transport{
		Proxy:                 nil, // never route pod traffic through an environment proxy
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     false,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   perHost,
		IdleConnTimeout:       orDefault(s.IdleConnTimeout, 4*time.Second),
		TLSHandshakeTimeout:   orDefault(s.TLSHandshakeTimeout, 5*time.Second),
		ResponseHeaderTimeout: orDefault(s.ResponseHeaderTimeout, 10*time.Minute),
		ExpectContinueTimeout: time.Second,
		// Each pod connection holds one read and one write buffer for its
		// whole life, and an open stream holds its connection: 4 KiB each
		// (Go's default) is sized for bulk transfer. A response's headers
		// and an SSE event (~200 B) fit in 1 KiB, and larger reads and
		// writes bypass a bufio buffer that is empty.
		ReadBufferSize:  transportBufferSize,
		WriteBufferSize: transportBufferSize,
	}
}

// orDefault is d if set, else v.
func orDefault(d, v time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return v
}

// transportBufferSize is the read and the write buffer of a fallback pod
// connection (podconn sizes its own).
const transportBufferSize = 1 << 10
