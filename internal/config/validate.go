package config

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Validate reports every problem with c at once, joined with errors.Join;
// each is a *FieldError naming its key path and, where the value came from
// a file, its line. It does not fill defaults or change c: a Config built in
// code must name its upstreams and sources itself.
func (c *Config) Validate() error {
	return errors.Join(c.validate()...)
}

// checker collects problems, looking up each path's line in c.
type checker struct {
	c    *Config
	errs []error
}

func (k *checker) add(path, format string, args ...any) {
	k.errs = append(k.errs, &FieldError{Path: path, Line: k.c.Line(path), Msg: fmt.Sprintf(format, args...)})
}

func (c *Config) validate() []error {
	k := &checker{c: c}
	k.oneOf("mode", string(c.Mode), ModeEnforce, ModeObserve)
	k.server(c.Server)
	k.upstreams(c.Upstreams)
	k.transport(c.Transport)
	k.healthCheck(c.HealthCheck)
	k.pressure(c.Pressure)
	k.fastBreaker(c.FastBreaker)
	k.classes(c.Classes, c.FastBreaker.PerClient)
	k.modelLimits(c.ModelLimits)
	k.fairness(c.Fairness, c.FastBreaker.PerClient)
	k.quotas(c.Quotas, c.FastBreaker.PerClient, c.Classes)
	k.cluster(c.Cluster)
	k.tracing(c.Tracing)
	k.scaling(c.Scaling)
	k.endpointPicker(c.EndpointPicker, c.Server)
	k.batchQueue(c.Batch, c.Queue)
	k.routing(c.Routing)
	k.positive("estimate.chars_per_token", c.Estimate.CharsPerToken)
	k.atLeast("estimate.default_max_tokens", int64(c.Estimate.DefaultMaxTokens), 1)
	k.atLeast("estimate.bytes_per_logit", int64(c.Estimate.BytesPerLogit), 1)
	k.atLeast("estimate.prompt_logprobs_chunk", int64(c.Estimate.PromptLogprobsChunk), 1)
	if c.Shed.RetryAfter < time.Second {
		k.add("shed.retry_after", "must be at least 1s (Retry-After is sent in whole seconds), got %v", c.Shed.RetryAfter)
	}
	k.atLeast("upstream_breaker.failures", int64(c.UpstreamBreaker.Failures), 1)
	k.duration("upstream_breaker.open_for", c.UpstreamBreaker.OpenFor)
	k.atLeast("upstream_breaker.half_open_requests", int64(c.UpstreamBreaker.HalfOpenRequests), 1)
	k.hooks("hooks.degraded", c.Hooks.Degraded)
	k.hooks("hooks.critical", c.Hooks.Critical)
	k.hooks("hooks.recovered", c.Hooks.Recovered)
	k.oneOf("log.level", string(c.Log.Level), logDebug, logInfo, logWarn, logError)
	k.sourceNames()
	return k.errs
}

// oneOf checks that v is one of the allowed values.
func (k *checker) oneOf(path, v string, allowed ...any) {
	for _, a := range allowed {
		if v == fmt.Sprint(a) {
			return
		}
	}
	k.add(path, "must be one of %v, got %q", allowed, v)
}

// duration checks that d is positive.
func (k *checker) duration(path string, d time.Duration) {
	if d <= 0 {
		k.add(path, "must be positive, got %v", d)
	}
}

// notNegative checks that d is 0 or more; zero, if set, says in the error
// what 0 means for the key.
func (k *checker) notNegative(path string, d time.Duration, zero string) {
	switch {
	case d >= 0:
	case zero != "":
		k.add(path, "must not be negative (%s), got %v", zero, d)
	default:
		k.add(path, "must not be negative, got %v", d)
	}
}

func (k *checker) atLeast(path string, v, lo int64) {
	if v < lo {
		k.add(path, "must be at least %d, got %d", lo, v)
	}
}

// positive checks that v is a finite number above 0.
func (k *checker) positive(path string, v float64) {
	if !(v > 0) || math.IsInf(v, 0) {
		k.add(path, "must be a positive number, got %v", v)
	}
}

// fraction checks lo < v < hi, or lo < v ≤ hi when closed is set.
func (k *checker) fraction(path string, v float64, closed bool) {
	if ok := v > 0 && (v < 1 || closed && v == 1); !ok {
		bound := "below 1"
		if closed {
			bound = "at most 1"
		}
		k.add(path, "must be above 0 and %s, got %v", bound, v)
	}
}

func (k *checker) server(s Server) {
	k.listen("server.listen", s.Listen)
	k.listen("server.admin_listen", s.AdminListen)
	if s.Listen == s.AdminListen && s.Listen != "" {
		k.add("server.admin_listen", "must differ from server.listen (%q)", s.Listen)
	}
	k.atLeast("server.max_body_bytes", s.MaxBodyBytes, 1)
	k.notNegative("server.drain_delay", s.DrainDelay, "")
	k.duration("server.shutdown_timeout", s.ShutdownTimeout)
	if total := s.DrainDelay + s.ShutdownTimeout; total > time.Hour {
		k.add("server.shutdown_timeout", "drain_delay + shutdown_timeout is %v; more than 1h is almost certainly a typo", total)
	}
	k.duration("server.read_header_timeout", s.ReadHeaderTimeout)
	k.duration("server.idle_timeout", s.IdleTimeout)
	k.notNegative("server.send_timeout", s.SendTimeout, "0: none")
	k.atLeast("server.max_header_bytes", int64(s.MaxHeaderBytes), 1024)
	if !isToken(s.RequestIDHeader) {
		k.add("server.request_id_header", "must be a valid header name, got %q", s.RequestIDHeader)
	}
	k.atLeast("server.max_concurrent_streams", int64(s.MaxConcurrentStreams), 1)
	k.atLeast("server.max_connections", int64(s.MaxConnections), 0) // 0: no limit
	if d := s.Overload.SchedDelay; d != 0 && d < 100*time.Microsecond {
		k.add("server.overload.sched_delay", "must be 0 (not watched) or at least 100µs, got %v", d)
	}
	k.atLeast("server.overload.max_inflight", int64(s.Overload.MaxInflight), 0) // 0: no bound
	if s.H2C && s.TLS != nil {
		k.add("server.h2c", "is for a plaintext listener; with server.tls HTTP/2 is negotiated (ALPN), leave h2c out")
	}
	if t := s.TLS; t != nil {
		if t.CertFile == "" {
			k.add("server.tls.cert_file", "is required with server.tls")
		}
		if t.KeyFile == "" {
			k.add("server.tls.key_file", "is required with server.tls")
		}
	}
}

func (k *checker) transport(t Transport) {
	k.duration("transport.dial_timeout", t.DialTimeout)
	k.duration("transport.response_header_timeout", t.ResponseHeaderTimeout)
	k.duration("transport.idle_conn_timeout", t.IdleConnTimeout)
	k.atLeast("transport.max_idle_conns_per_host", int64(t.MaxIdleConnsPerHost), 1)
	k.duration("transport.tls_handshake_timeout", t.TLSHandshakeTimeout)
}

func (k *checker) healthCheck(h HealthCheck) {
	if len(h.Path) == 0 || h.Path[0] != '/' {
		k.add("health_check.path", "must start with /, got %q", h.Path)
	}
	k.duration("health_check.interval", h.Interval)
	k.duration("health_check.timeout", h.Timeout)
	if h.Timeout > h.Interval && h.Interval > 0 {
		k.add("health_check.timeout", "must not exceed health_check.interval (%v), got %v", h.Interval, h.Timeout)
	}
	k.atLeast("health_check.unhealthy_after", int64(h.UnhealthyAfter), 1)
	k.atLeast("health_check.healthy_after", int64(h.HealthyAfter), 1)
}

func (k *checker) fastBreaker(f FastBreaker) {
	if !(f.QPS >= 0) || math.IsInf(f.QPS, 0) {
		k.add("fast_breaker.qps", "must be a number ≥ 0 (0 turns the global limit off), got %v", f.QPS)
	}
	if f.QPS > 0 {
		k.atLeast("fast_breaker.burst", int64(f.Burst), 1)
	}
	if p := f.PerClient; p != nil {
		if !isToken(p.Header) {
			k.add("fast_breaker.per_client.header", "must be a valid header name, got %q", p.Header)
		}
		k.positive("fast_breaker.per_client.qps", p.QPS)
		if p.QPS > 0 {
			k.atLeast("fast_breaker.per_client.burst", int64(p.Burst), 1)
		}
		k.atLeast("fast_breaker.per_client.max_clients", int64(p.MaxClients), 1)
		k.duration("fast_breaker.per_client.idle_after", p.IdleAfter)
	}
}

func (k *checker) batchQueue(b Batch, q Queue) {
	k.fraction("batch.cut", b.Cut, false)
	k.duration("batch.cut_every", b.CutEvery)
	k.fraction("batch.worse_by", b.WorseBy, false)
	k.fraction("batch.ramp_step", b.RampStep, true)
	k.duration("batch.ramp_every", b.RampEvery)
	k.notNegative("batch.failure_hold", b.FailureHold, "0: for as long as gatekeeper runs")
	k.fraction("batch.memory_share", b.MemoryShare, true)
	k.atLeast("queue.max_length", int64(q.MaxLength), 1)
	k.atLeast("queue.max_tokens", q.MaxTokens, 1)
	k.duration("queue.max_wait", q.MaxWait)
	k.duration("queue.starvation_after", q.StarvationAfter)
	if q.StarvationAfter >= q.MaxWait && q.MaxWait > 0 {
		k.add("queue.starvation_after", "must be shorter than queue.max_wait (%v), or no waiter ever ages, got %v", q.MaxWait, q.StarvationAfter)
	}
	k.oneOf("queue.order", string(q.Order), OrderShortestFirst, OrderEarliestDeadline)
	k.notNegative("queue.ttft_deadline", q.TTFTDeadline, "0: none")
	if q.DeadlineHeader != "" && !isToken(q.DeadlineHeader) {
		k.add("queue.deadline_header", "must be a valid header name or empty, got %q", q.DeadlineHeader)
	}
}
