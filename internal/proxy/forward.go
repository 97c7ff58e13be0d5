package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/classify"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/telemetry/coretrace"
	"github.com/gatekeeper-dev/gatekeeper/internal/usage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// flight is what the reverse proxy learns about one forwarded request. It
// travels in the request context because ReverseProxy's hooks see only the
// request. It is that context (the client's, plus itself as the value of
// flightKey: a context, not a struct storing one), and it holds the
// forwarded body's reader and the usage watcher, so that one allocation
// serves what took six (issue 16).
type flight struct {
	context.Context // the client's request context, read-only once built

	member    *pods.Member
	metrics   *Metrics
	status    int   // pod's status, 0 if none arrived
	err       error // transport error, nil if a response arrived
	firstByte time.Time
	ex        *exchange
	// refused: the pod answered 503 or 429 itself (overload, not failure).
	refused bool
	// retry, when set, is a slot on another pod for the one retry of a
	// request that never reached this pod's engine (its own refusal before
	// any body byte, or a dial error); nothing was written to the client.
	retry *decide.Admitted
	// streamErr: the 200 stream carried an error event.
	streamErr bool
	// used is the usage the response reported (Known false until it has).
	used usage.Tokens
	// sent is when it left for the pod; span is its client span (nil
	// without tracing).
	sent time.Time
	span trace.Span

	body  heldBody     // the buffered request body, until the answer is accepted
	usage usage.Body   // the response body, when its usage is read
	out   clientWriter // the client's ResponseWriter, with the send timeout

	// A stream that may be handed off (handoff.go) runs under a context of
	// its own (detach): client is the request's, cancel ends the pod's
	// request, stopFollowing stops the client's leaving from ending it.
	client        context.Context
	cancel        context.CancelFunc
	stopFollowing func() bool
	// rest is the held stream's body after its first read (holdRest):
	// readOnce says that read was made, restEnded that it ended the body.
	rest                io.ReadCloser
	readOnce, restEnded bool
	// keepConn: a handed-off connection goes back to the server after the
	// stream (ReturnConnsTo), so the answer does not say Connection: close.
	keepConn bool
	// handedOff: a goroutine of its own relays the rest (relay), which
	// owns the flight from then on; clientGone: the client left after
	// that (a write to it failed, or the watching read ended).
	handedOff  bool
	clientGone atomic.Bool
}

// clientLeft reports whether the client left before its answer ended: the
// request's context, until a handoff; then the relay's clientGone.
func (f *flight) clientLeft(r *http.Request) bool {
	if f.handedOff {
		return f.clientGone.Load()
	}
	return r.Context().Err() != nil
}

// Value returns f for flightKey and asks the client's context otherwise.
func (f *flight) Value(key any) any {
	if key == (flightKey{}) {
		return f
	}
	return f.Context.Value(key)
}

// ReportUsage counts the usage a 200 response reported as its body streamed
// through; usage.Body calls it on the handler goroutine, before complete.
func (f *flight) ReportUsage(u usage.Tokens) {
	f.metrics.Usage(f.member.Name, u)
	f.streamErr = u.StreamError
	f.used = u
}

// usage is what the response reported it used, for the true-up of the
// request's charges.
func (f *flight) reported() decide.Usage {
	return decide.Usage{Prompt: f.used.Prompt, Completion: f.used.Completion, Known: f.used.Known}
}

// errRetry ends a forward whose request goes to another pod instead.
var errRetry = errors.New("proxy: retried on another pod")

type flightKey struct{}

func flightFrom(ctx context.Context) *flight {
	f, _ := ctx.Value(flightKey{}).(*flight)
	return f
}

// newReverseProxy builds a ReverseProxy shared by every upstream; the target
// is chosen per request and carried in the context. The Handler has two,
// which differ only in the copy buffers they take from buffers.
func (h *Handler) newReverseProxy(rt http.RoundTripper, buffers httputil.BufferPool) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			f := flightFrom(pr.In.Context())
			pr.SetURL(f.member.URL)
			pr.SetXForwarded()
			// The client's 100-continue expectation is gatekeeper's to meet,
			// and net/http's server met it when the body was read (as
			// Envoy does by default). Passed on, it sent the request down
			// the fallback transport to wait for the pod's own 100, which
			// reached the client as a second one (TestExpectContinue).
			pr.Out.Header.Del("Expect")
			if f.body.send != nil {
				// ReverseProxy wraps every body in a reader of its own, which
				// net/http cannot see into: it then writes the headers to the
				// pod, and the body in a second write. The buffered body needs
				// no protection from Close, and net/http sends it with the
				// headers in one write.
				pr.Out.Body = f.body.send
			}
			if f.span != nil { // ours replaces the client's trace context
				pr.Out.Header.Del("Tracestate")
				h.tracing.prop.Inject(f, propagation.HeaderCarrier(pr.Out.Header))
			}
		},
		Transport: rt,
		// 0: ReverseProxy flushes every read of an SSE or unknown-length
		// body (a token stream) at once by itself, whatever this says, so
		// streams go out chunk by chunk (TestUnknownLengthStreamsFlush). -1
		// would also flush a body with a Content-Length, which is complete
		// when it comes (a pod's non-streamed answer): its headers from a
		// timer armed per response, on a goroutine of its own, then the
		// body, two writes where one does. With 0 it goes out with its
		// headers in one write when the handler returns, or as net/http's
		// buffers fill (issue 38; bench/README.md has the figures).
		FlushInterval: 0,
		ErrorLog:      slog.NewLogLogger(h.log.Handler(), slog.LevelWarn),
		ModifyResponse: func(res *http.Response) error {
			f := flightFrom(res.Request.Context())
			f.status = res.StatusCode
			f.firstByte = h.now()
			f.out.flushHeader = flushesAtOnce(res)
			// The client already has the id on the response; a pod that echoes
			// it (vLLM --enable-request-id-headers) would add a second value,
			// which the OpenAI SDKs read as "id, id".
			res.Header.Del(f.ex.Policy.RequestIDHeader)
			h.afterInterim(f)
			refused := res.StatusCode == http.StatusServiceUnavailable || res.StatusCode == http.StatusTooManyRequests
			if refused && h.podRefused(f, res) != nil {
				return errRetry // it goes to another pod, body and all
			}
			f.ex.accept(res.Request) // no retry from here on: the body is dropped
			if refused || !reportsUsage(f.ex.Kind) {
				return nil
			}
			f.usage.Watch(res, f) // count the usage as the body streams through
			f.holdRest(res)
			return nil
		},
		ErrorHandler: h.proxyError,
		BufferPool:   buffers,
	}
}

// afterInterim puts back the headers the handler set on the client's
// answer before forwarding (the request id; Connection: close while
// draining) when a 1xx the pod sent first took them: ReverseProxy clears
// the ResponseWriter's headers after relaying each 1xx.
func (h *Handler) afterInterim(f *flight) {
	hdr := f.out.Header()
	key := http.CanonicalHeaderKey(f.ex.Policy.RequestIDHeader)
	if len(hdr[key]) > 0 {
		return // no 1xx came, or the pod sent none
	}
	hdr[key] = []string{f.ex.id}
	if h.core.Draining() {
		hdr.Set("Connection", "close")
	}
}

// flushesAtOnce reports whether ReverseProxy flushes res's body as it
// comes, and so its headers at once: an SSE body, or one of unknown length
// (its flushInterval, with FlushInterval 0).
func flushesAtOnce(res *http.Response) bool {
	ct, _, _ := strings.Cut(res.Header.Get("Content-Type"), ";")
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream") || res.ContentLength == -1
}

// reportsUsage reports whether responses of this kind carry a usage object
// (generated text, embeddings, scores): /v1/models and audio do not, so
// reading them would only count unknown usages.
func reportsUsage(k classify.Kind) bool { return k != classify.KindModels && k != classify.KindAudio }

// Sizes of the reverse proxy's copy buffers. A response holds one for as
// long as its body is copied, so an open token stream holds one for its
// whole life: a 32 KiB buffer was a third of what a stream costs gatekeeper
// (issue 16, BenchmarkOpenStreams). SSE events are a few hundred bytes and
// every read is flushed on at once, so streams use a 2 KiB buffer, the size
// of net/http's response buffer in front of it: an event up to that size
// is one read and one write, and a larger one is split as much by the
// pod-side reads as by this buffer (issue 38: bench/README.md, "The
// handler's stack and heap per stream"). Other bodies keep ReverseProxy's
// default, 32 KiB, so a large JSON body still goes out in few writes.
const (
	copyBufferSize   = 32 << 10
	streamBufferSize = 2 << 10
)

// bufferPool recycles the reverse proxy's copy buffers, which it would
// otherwise allocate for every response. It pools pointers to arrays, which
// a slice converts back to without allocating (a *[]byte made in Put would
// cost an allocation per response). The zero value is ready to use.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if a, ok := b.p.Get().(*[copyBufferSize]byte); ok {
		return a[:]
	}
	return new([copyBufferSize]byte)[:]
}

func (b *bufferPool) Put(buf []byte) {
	if len(buf) == copyBufferSize {
		b.p.Put((*[copyBufferSize]byte)(buf))
	}
}

// streamBufferPool is bufferPool for the copy buffers of streamed responses.
type streamBufferPool struct{ p sync.Pool }

func (b *streamBufferPool) Get() []byte {
	if a, ok := b.p.Get().(*[streamBufferSize]byte); ok {
		return a[:]
	}
	return new([streamBufferSize]byte)[:]
}

func (b *streamBufferPool) Put(buf []byte) {
	if len(buf) == streamBufferSize {
		b.p.Put((*[streamBufferSize]byte)(buf))
	}
}

// podRefused handles a pod's own 503 or 429 (vLLM's full queue): overload,
// not failure (the core's Finish tells the controller, which cuts the pod's
// window as if degraded). The request goes once to another pod with room
// now, else the pod's answer is passed on with Retry-After (the pod's, or
// ours) and the reason added.
func (h *Handler) podRefused(f *flight, res *http.Response) error {
	f.refused = true
	if s := h.retrySlot(f); s != nil {
		f.retry = s
		return errRetry // ReverseProxy closes the pod's body and calls proxyError
	}
	if res.Header.Get("Retry-After") == "" {
		res.Header.Set("Retry-After", decide.RetryAfterSeconds(f.ex.Policy.RetryAfter))
	}
	res.Header.Set("X-Gatekeeper-Reason", string(decide.ReasonUpstreamOverloaded))
	return nil
}

// retrySlot takes a slot on another pod for f's request, at once or not at
// all: only a request's first forward is retried, and only where a pod
// that has not seen it has room now.
func (h *Handler) retrySlot(f *flight) *decide.Admitted {
	ex := f.ex
	if ex.retried {
		return nil
	}
	next, _ := h.core.Retry(&ex.Request, append(slices.Clip(ex.Skip), f.member.Name))
	return next
}

// proxyError is ReverseProxy's single error writer: a transport error before
// any response byte reached the client. A request that was never sent (a
// dial error) goes once to another pod with room, as a pod's own refusal
// does.
func (h *Handler) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	f := flightFrom(r.Context())
	if errors.Is(err, errRetry) {
		return // f.retry carries the request on
	}
	f.err = err
	if r.Context().Err() != nil {
		return // the client left; nobody to answer
	}
	if neverSent(err) {
		if s := h.retrySlot(f); s != nil {
			f.retry = s
			return
		}
	}
	rf := decide.Refuse(decide.ReasonUpstream, "the upstream could not be reached; retry later", f.ex.Policy.RetryAfter, f.ex.Policy.RetryAfter)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		rf = decide.Refuse(decide.ReasonUpstreamTimeout, "the upstream did not answer in time", 0, 0)
	}
	h.metrics.Rejected(rf.Reason)
	writeRefusal(w, rf)
}

// neverSent reports whether err shows that the request never left: the
// connection to the pod could not be opened.
func neverSent(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// forward sends ex's request to the member dispatch chose and records its
// outcome when the response body has been copied (not when headers arrive),
// releasing the slot then. Its frame is live while the response streams,
// so what only the start needs is built in prepare (see serveTraffic).
func (h *Handler) forward(w http.ResponseWriter, ex *exchange) (retry *decide.Admitted) {
	out := h.prepare(w, ex)
	f := ex.flight
	completed := false
	defer func() {
		if f.handedOff {
			return // relay owns f and records the outcome
		}
		p := recover() // http.ErrAbortHandler when the stream broke mid-copy
		f.out.disarm()
		if f.rest != nil {
			_ = f.rest.Close()
		}
		retry = h.complete(ex, completed)
		if p != nil {
			panic(p)
		}
	}()
	rp := h.rp
	if ex.Stream {
		rp = h.rpStream // the small copy buffer: it is held while the stream lasts
	}
	rp.ServeHTTP(&f.out, out)
	if f.rest != nil && !f.restEnded {
		if h.handOff(w, ex) {
			return nil
		}
		h.copyRest(f)
	}
	completed = true
	return nil
}

// copyRest relays the rest of a held stream through net/http, when it was
// not handed off; it panics with http.ErrAbortHandler where ReverseProxy
// would (a read or a write that failed), so that the client sees the stream
// cut short.
func (h *Handler) copyRest(f *flight) {
	bp := h.rpStream.BufferPool
	buf := bp.Get()
	defer bp.Put(buf)
	for {
		n, err := f.rest.Read(buf)
		if n > 0 {
			if _, werr := f.out.Write(buf[:n]); werr != nil {
				panic(http.ErrAbortHandler)
			}
			f.out.Flush()
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			panic(http.ErrAbortHandler)
		}
	}
}

// prepare makes ex's flight to the member dispatch chose and the request
// the reverse proxy sends there.
func (h *Handler) prepare(w http.ResponseWriter, ex *exchange) *http.Request {
	r, m, body := ex.r, ex.member, ex.body
	ex.upstream = m.Name
	if ex.Policy.ForwardPriority[m.Name] && ex.Kind.JSON() {
		if b := withPriority(body, ex.Class, ex.HasPriority); b != nil {
			body = b
		}
	}
	h.metrics.Sent(m.Name, ex.Tokens)
	f := &flight{Context: r.Context(), member: m, metrics: h.metrics, ex: ex, sent: h.now()}
	if ex.span != nil {
		f.Context, f.span = h.tracing.startClient(f.Context, ex)
	}
	ex.flight = f
	out := r.WithContext(f)
	if body != nil {
		f.body.set(body)
		out.Body = f.body.send
		out.ContentLength = int64(len(body))
		out.TransferEncoding = nil // the buffered body goes out framed by Content-Length alone
		out.GetBody = f.body.get   // reads what is still held: an error once the answer is accepted
	}
	if h.mayHandOff(w, r, ex) {
		f.detach()
		f.keepConn = h.server.Load() != nil && !r.Close
	}
	f.out = clientWriter{w: w, timeout: ex.Policy.SendTimeout, now: h.now}
	if sendConnFor(r) != nil {
		f.out.timeout = 0 // its connection bounds every write by progress (SendListener)
	}
	return out
}

// complete turns what happened to ex's request into an End for the core's
// Finish, which decides the one outcome, the breaker's result and what the
// request is charged; complete records them and releases the slot.
// completed says the response body was copied to its end. A request that
// goes to another pod instead records no outcome: complete returns the slot
// it goes on with.
func (h *Handler) complete(ex *exchange, completed bool) *decide.Admitted {
	r, f := ex.r, ex.flight
	defer ex.adm.Slot.Release()
	if f.span != nil {
		endClient(f, f.sent)
	}
	e := decide.End{Status: f.status, StreamError: f.streamErr, Usage: f.reported(), Retry: f.retry != nil}
	switch {
	// A response copied to the end counts as the pod's answer even if the
	// client closes its connection right after: only a request cut short
	// by the client is client_closed. One whose last flush the client never
	// took within send_timeout is not delivered: ReverseProxy drops flush
	// errors, so its copy ends as if it had been.
	case completed && f.err == nil && f.status != 0 && !f.out.timedOut:
		e.Cut = decide.CutNone
	case f.out.timedOut:
		e.Cut = decide.CutTimeout
	case f.clientLeft(r):
		e.Cut = decide.CutClient
	default: // a transport error, or the stream broke mid-copy
		e.Cut = decide.CutUpstream
	}
	end := h.core.Finish(&ex.Request, ex.adm, e)
	if e.Retry {
		h.metrics.Response(f.member.Name, end.Status)
		return f.retry
	}
	switch {
	case end.Outcome == decide.OutcomeClientTimeout, end.Outcome == decide.OutcomeClientClosed:
	case e.Cut != decide.CutNone:
		h.metrics.Response(f.member.Name, 0)
	default:
		h.metrics.Response(f.member.Name, f.status)
	}
	switch {
	case end.PodRefused:
		h.metrics.Rejected(decide.ReasonUpstreamOverloaded)
	case end.Outcome == decide.OutcomeServed:
		if !f.firstByte.IsZero() {
			h.metrics.firstByte(f.member.Name, f.firstByte.Sub(ex.Start))
		}
		if f.status == http.StatusOK {
			h.metrics.genAI(f, coretrace.Operation(ex.Kind), ex.Stream, ex.Start, f.out.first, h.now(), f.used.Known, f.used.Prompt, f.used.Completion)
		}
	}
	h.finish(r, ex, end.Outcome, end.Status)
	return nil
}
