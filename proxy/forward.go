package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/proxy/usage"
)

// flight is what the reverse proxy learns about one forwarded request. It
// travels in the request context because ReverseProxy's hooks see only the
// request.
type flight struct {
	member    *member
	status    int   // pod's status, 0 if none arrived
	err       error // transport error, nil if a response arrived
	firstByte time.Time
}

type flightKey struct{}

func flightFrom(ctx context.Context) *flight {
	f, _ := ctx.Value(flightKey{}).(*flight)
	return f
}

// newReverseProxy builds the one ReverseProxy shared by every upstream; the
// target is chosen per request and carried in the context.
func (h *Handler) newReverseProxy(rt http.RoundTripper) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			f := flightFrom(pr.In.Context())
			pr.SetURL(f.member.URL)
			pr.SetXForwarded()
		},
		Transport: rt,
		// -1: every write goes out at once (DESIGN, STYLE §9), whatever the
		// pod's content type. 0 would rely on ReverseProxy recognising SSE
		// and unknown-length bodies; it saves one socket write per complete
		// JSON response (bench/README.md) but the CPU gain was within noise.
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(h.log.Handler(), slog.LevelWarn),
		ModifyResponse: func(res *http.Response) error {
			f := flightFrom(res.Request.Context())
			f.status = res.StatusCode
			f.firstByte = h.now()
			name := f.member.Name // count the usage as the body streams through
			usage.Watch(res, func(u usage.Tokens) { h.metrics.usage(name, u) })
			return nil
		},
		ErrorHandler: h.proxyError,
		BufferPool:   &bufferPool{},
	}
}

// bufferPool recycles the reverse proxy's 32 KiB copy buffers, which it
// would otherwise allocate for every response.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

// proxyError is ReverseProxy's single error writer: a transport error before
// any response byte reached the client.
func (h *Handler) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	f := flightFrom(r.Context())
	f.err = err
	if r.Context().Err() != nil {
		return // the client left; nobody to answer
	}
	status, msg := http.StatusBadGateway, "the upstream could not be reached"
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		status, msg = http.StatusGatewayTimeout, "the upstream did not answer in time"
	}
	writeRefusal(w, refusal{status: status, message: msg})
}

// forward sends ex's request to the member dispatch chose and records its
// outcome when the response body has been copied (not when headers arrive),
// releasing the slot then.
func (h *Handler) forward(w http.ResponseWriter, ex *exchange) {
	r, m, body := ex.r, ex.member, ex.body
	ex.upstream = m.Name
	h.metrics.sent(m.Name, ex.tokens)
	ex.flight = &flight{member: m}
	out := r.WithContext(context.WithValue(r.Context(), flightKey{}, ex.flight))
	if body != nil {
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.ContentLength = int64(len(body))
		out.TransferEncoding = nil // the buffered body goes out framed by Content-Length alone
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	completed := false
	defer func() {
		p := recover() // http.ErrAbortHandler when the stream broke mid-copy
		h.complete(ex, completed)
		if p != nil {
			panic(p)
		}
	}()
	h.rp.ServeHTTP(w, out)
	completed = true
}

// complete turns what happened to ex's request into one outcome, one breaker
// result and a released slot; completed says the response body was copied to
// its end.
func (h *Handler) complete(ex *exchange, completed bool) {
	r, f, done := ex.r, ex.flight, ex.done
	defer ex.slot.Release()
	// A response copied to the end counts as the pod's answer even if the
	// client closes its connection right after: only a request cut short
	// by the client is client_closed.
	delivered := completed && f.err == nil && f.status != 0
	switch {
	case delivered && f.status >= 500:
		done(Failure)
		h.metrics.response(f.member.Name, f.status)
		h.finish(r, ex, OutcomeUpstreamError, f.status)
	case delivered:
		done(Success)
		h.metrics.response(f.member.Name, f.status)
		if !f.firstByte.IsZero() {
			h.metrics.firstByte(f.member.Name, f.firstByte.Sub(ex.start))
		}
		h.finish(r, ex, OutcomeServed, f.status)
	case r.Context().Err() != nil:
		done(Excluded)
		h.finish(r, ex, OutcomeClientClosed, StatusClientClosed)
	default: // a transport error, or the stream broke mid-copy
		done(Failure)
		h.metrics.response(f.member.Name, 0)
		h.finish(r, ex, OutcomeUpstreamError, http.StatusBadGateway)
	}
}
