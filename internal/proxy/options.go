package proxy

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TransportSettings bounds every upstream connection. Zero fields take the
// defaults in brackets.
type TransportSettings struct {
	// DialTimeout bounds a TCP connect [2s].
	DialTimeout time.Duration
	// TLSHandshakeTimeout bounds a TLS handshake [5s].
	TLSHandshakeTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for response headers [10m]:
	// a non-streaming completion sends its headers only when it is done.
	ResponseHeaderTimeout time.Duration
	// IdleConnTimeout closes pooled connections before vLLM's 5 s keep-alive
	// does, so a request never lands on a connection the pod is closing [4s].
	IdleConnTimeout time.Duration
	// MaxIdleConnsPerHost bounds the pooled connections per pod [256].
	MaxIdleConnsPerHost int
}

// Options configures a Handler. Create one with New.
type Options struct {
	// Core is the decision core the handler asks (its pod registry, queue,
	// breakers and policy); required.
	Core *decide.Core
	// Transport bounds upstream connections.
	Transport TransportSettings
	// RoundTripper, if set, replaces the transport built from Transport:
	// cmd/gatekeeper builds it with NewTransport and hands the same one to
	// the pods' health check; tests pass fakes.
	RoundTripper http.RoundTripper
	// Metrics receives counts; nil records nothing.
	Metrics *Metrics
	// Logger receives state changes and, at debug, one line per request.
	// Nil discards.
	Logger *slog.Logger
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
	// Version is reported in logs and the build info metric.
	Version string
	// TracerProvider, if set, makes the handler's spans (the inbound server
	// span, the admission, the client span to the pod) and sends W3C trace
	// context to the pod. Nil traces nothing and costs one nil check.
	TracerProvider trace.TracerProvider
	// Propagator reads and writes trace context; nil means W3C traceparent.
	Propagator propagation.TextMapPropagator
	// TrustClientContext makes a client's traceparent the parent of the
	// server span; false starts a new trace that links to it.
	TrustClientContext bool
	// PodState, if set, reports a pod's pressure level and window for the
	// admission span.
	PodState func(upstream string) (level string, window int)
	// Overload, if set, is asked before a request's body is read whether
	// gatekeeper itself has room for it (package overload); nil admits all.
	Overload Overload
	// StreamHandoff hands a plain-text HTTP/1.1 token stream off net/http's
	// serving goroutine once its first event is out (handoff.go); the
	// connection goes back to the server after the stream where
	// Handler.ReturnConnsTo names one, and closes otherwise. False keeps
	// every stream on net/http.
	StreamHandoff bool
	// HandedOffClosed, if set, is called when the client connection of a
	// stream handed off closes or is served again: http.Server's ConnState
	// reports it hijacked at the handoff, while it is still open, and new
	// when it is served again.
	HandedOffClosed func()
}

// Overload is what the handler asks of gatekeeper's own saturation.
type Overload interface {
	// Admit reports whether a new request may go on; when it may, the
	// caller calls Done exactly once when the request ends.
	Admit() bool
	Done()
}

func (o Options) validate() error {
	if o.Core == nil {
		return errors.New("proxy: Options.Core is required")
	}
	return nil
}
