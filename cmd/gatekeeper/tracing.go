package main

import (
	"context"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/epp"
	"github.com/gatekeeper-dev/gatekeeper/internal/policy"
	"github.com/gatekeeper-dev/gatekeeper/internal/proxy"
	"github.com/gatekeeper-dev/gatekeeper/internal/telemetry"
	"go.opentelemetry.io/otel/trace"
)

// newTracer builds the tracer provider of cfg's tracing section; nil
// without one (no spans, nothing exported).
func (a *app) newTracer(cfg *config.Config) error {
	if cfg.Tracing == nil {
		return nil
	}
	s := policy.TracingSettings(cfg.Tracing, version, a.opts.getenv)
	s.Exporter = a.opts.spanExporter
	p, err := telemetry.New(context.Background(), s)
	if err != nil {
		return err
	}
	a.tracer = p
	return nil
}

// traceOptions sets the proxy's tracing options from the running policy.
func (a *app) traceOptions(cfg *config.Config, o *proxy.Options) {
	if a.tracer == nil {
		return
	}
	var tp trace.TracerProvider = a.tracer
	o.TracerProvider, o.Propagator = tp, telemetry.Propagator()
	o.TrustClientContext = cfg.Tracing.TrustClientContext
	o.PodState = a.ctl.LevelWindow
}

// pickerTraceOptions sets the endpoint picker's tracing options from the
// running policy: the same provider and trust as the proxy's.
func (a *app) pickerTraceOptions(cfg *config.Config, o *epp.Options, c *epp.CoreOptions) {
	if a.tracer == nil {
		return
	}
	var tp trace.TracerProvider = a.tracer
	o.TracerProvider, o.Propagator = tp, telemetry.Propagator()
	o.TrustClientContext = cfg.Tracing.TrustClientContext
	c.PodState = a.ctl.LevelWindow
}

// shutdownTracer flushes the spans still buffered, within shutdown_timeout.
func (a *app) shutdownTracer() {
	if a.tracer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg().Server.ShutdownTimeout)
	defer cancel()
	_ = a.tracer.Shutdown(ctx)
}
