// Package telemetry builds gatekeeper's OpenTelemetry trace pipeline: a
// tracer provider exporting OTLP (gRPC or HTTP) from Settings and the
// standard OTEL_* environment variables, and the W3C propagator. It holds
// no global: the provider is handed to the fronts through their options.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// Protocol is the OTLP transport.
type Protocol string

// Protocols.
const (
	grpc Protocol = "grpc"
	HTTP Protocol = "http"
)

// Settings configures a Provider. The zero value exports over gRPC to what
// OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT names (else localhost:4317), with
// the sampler OTEL_TRACES_SAMPLER(_ARG) names (else parent-based always-on).
// A field that is set wins over its environment variable.
type Settings struct {
	// Endpoint is the collector's host:port, or a URL for HTTP ("" : the
	// exporter's environment variables and defaults).
	Endpoint string
	// Protocol is GRPC or HTTP; "" means OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL
	// ("http/protobuf" selects HTTP), else GRPC.
	Protocol Protocol
	// SampleRatio, if set, is the fraction of new traces sampled, in [0, 1],
	// parent-based: a trusted parent's decision is kept. Nil: the
	// environment's sampler.
	SampleRatio *float64
	// Headers are added to every export (an API key); nil: the
	// environment's OTEL_EXPORTER_OTLP_HEADERS.
	Headers map[string]string
	// Insecure sends without TLS (gRPC) or over http:// (HTTP).
	Insecure bool
	// Version is the service.version resource attribute.
	Version string
	// Getenv reads the environment. Nil: no variable is set (tests); the
	// exporters themselves still read OTEL_EXPORTER_OTLP_* from the process.
	Getenv func(string) string
	// Exporter, if set, replaces the OTLP exporter (tests).
	Exporter sdktrace.SpanExporter
}

// Provider is a tracer provider with its exporter. Create one with New and
// end it with Shutdown.
type Provider struct {
	*sdktrace.TracerProvider
}

// New builds the provider. It does not dial: the exporter connects when
// the first batch leaves.
func New(ctx context.Context, s Settings) (*Provider, error) {
	if s.SampleRatio != nil && (*s.SampleRatio < 0 || *s.SampleRatio > 1) {
		return nil, fmt.Errorf("telemetry: SampleRatio %v is outside [0, 1]", *s.SampleRatio)
	}
	getenv := s.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	exp := s.Exporter
	if exp == nil {
		var err error
		if exp, err = newExporter(ctx, s, getenv); err != nil {
			return nil, err
		}
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName("gatekeeper"), semconv.ServiceVersion(s.Version)))
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	if name := getenv("OTEL_SERVICE_NAME"); name != "" { // the operator's name wins
		res, _ = resource.Merge(res, resource.NewSchemaless(semconv.ServiceName(name)))
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if s.SampleRatio != nil {
		opts = append(opts, sdktrace.WithSampler(sampler(*s.SampleRatio)))
	}
	return &Provider{sdktrace.NewTracerProvider(opts...)}, nil
}

// sampler is the policy's sampler: ratio of new traces, parent-based.
func sampler(ratio float64) sdktrace.Sampler {
	return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
}

// Propagator is the W3C trace context (traceparent, tracestate).
func Propagator() propagation.TextMapPropagator { return propagation.TraceContext{} }

// Shutdown flushes what is buffered and stops the exporter, until ctx ends.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.TracerProvider == nil {
		return nil
	}
	return p.TracerProvider.Shutdown(ctx)
}

// protocol resolves the transport: the setting, else the environment.
func protocol(s Settings, getenv func(string) string) (Protocol, error) {
	if s.Protocol != "" {
		return s.Protocol, nil
	}
	env := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if env == "" {
		env = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch env {
	case "", "grpc":
		return grpc, nil
	case "http/protobuf":
		return HTTP, nil
	}
	return "", fmt.Errorf("telemetry: OTEL_EXPORTER_OTLP_PROTOCOL %q: want grpc or http/protobuf", env)
}

func newExporter(ctx context.Context, s Settings, getenv func(string) string) (sdktrace.SpanExporter, error) {
	p, err := protocol(s, getenv)
	if err != nil {
		return nil, err
	}
	switch p {
	case grpc:
		var o []otlptracegrpc.Option
		if s.Endpoint != "" {
			o = append(o, grpcEndpoint(s.Endpoint))
		}
		if s.Insecure {
			o = append(o, otlptracegrpc.WithInsecure())
		}
		if s.Headers != nil {
			o = append(o, otlptracegrpc.WithHeaders(s.Headers))
		}
		return otlptracegrpc.New(ctx, o...)
	case HTTP:
		var o []otlptracehttp.Option
		if s.Endpoint != "" {
			o = append(o, httpEndpoint(s.Endpoint))
		}
		if s.Insecure {
			o = append(o, otlptracehttp.WithInsecure())
		}
		if s.Headers != nil {
			o = append(o, otlptracehttp.WithHeaders(s.Headers))
		}
		return otlptracehttp.New(ctx, o...)
	}
	return nil, errors.New("telemetry: Protocol " + string(p) + ": want grpc or http")
}

// grpcEndpoint takes host:port, or a URL (whose scheme decides TLS).
func grpcEndpoint(e string) otlptracegrpc.Option {
	if strings.Contains(e, "://") {
		return otlptracegrpc.WithEndpointURL(e)
	}
	return otlptracegrpc.WithEndpoint(e)
}

// httpEndpoint takes host:port (the path /v1/traces), or a full URL, used
// as given (its path too).
func httpEndpoint(e string) otlptracehttp.Option {
	if strings.Contains(e, "://") {
		return otlptracehttp.WithEndpointURL(e)
	}
	return otlptracehttp.WithEndpoint(e)
}
