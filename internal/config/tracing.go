package config

// Tracing exports OpenTelemetry traces over OTLP (issue 27). Optional:
// without it gatekeeper makes no spans. The standard OTEL_* environment
// variables apply where a key is unset (OTEL_EXPORTER_OTLP_ENDPOINT,
// _HEADERS, _PROTOCOL, OTEL_TRACES_SAMPLER(_ARG), OTEL_SERVICE_NAME); a key
// that is set wins. Restart-only.
type Tracing struct {
	// Endpoint is the collector: host:port, or a URL used as given (for
	// http, its path too, e.g. http://collector:4318/v1/traces). "" means
	// OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, else localhost:4317 (grpc) or
	// localhost:4318 (http).
	Endpoint string `yaml:"endpoint"`
	// Protocol is grpc or http (OTLP/HTTP protobuf); "" means
	// OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL, else grpc.
	Protocol string `yaml:"protocol"`
	// SampleRatio is the fraction of new traces sampled, in [0, 1], parent-
	// based (a trusted parent's decision is kept). Unset means
	// OTEL_TRACES_SAMPLER(_ARG), else every trace.
	SampleRatio *float64 `yaml:"sample_ratio"`
	// Headers are sent with every export (a collector's API key); unset
	// means OTEL_EXPORTER_OTLP_HEADERS. Their values are never logged.
	Headers map[string]string `yaml:"headers" log:"redact"`
	// Insecure exports without TLS.
	Insecure bool `yaml:"insecure"`
	// TrustClientContext makes a client's traceparent the parent of
	// gatekeeper's span; false (the default) starts a new trace that links
	// to the client's.
	TrustClientContext bool `yaml:"trust_client_context"`
}

func (k *checker) tracing(t *Tracing) {
	if t == nil {
		return
	}
	if t.Protocol != "" {
		k.oneOf("tracing.protocol", t.Protocol, "grpc", "http")
	}
	if r := t.SampleRatio; r != nil && (*r < 0 || *r > 1) {
		k.add("tracing.sample_ratio", "must be within [0, 1], got %v", *r)
	}
}
