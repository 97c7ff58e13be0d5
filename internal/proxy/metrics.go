package proxy

import (
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/usage"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy's Prometheus series. Create them with NewMetrics on
// the process's own registry; a nil *Metrics records nothing.
type Metrics struct {
	requests    *prometheus.CounterVec
	rejections  *prometheus.CounterVec
	decisions   *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	ttfb        *prometheus.HistogramVec
	queueWait   *prometheus.HistogramVec
	tokens      *prometheus.CounterVec
	usedTokens  *prometheus.CounterVec
	usageLost   *prometheus.CounterVec
	upstreamRes *prometheus.CounterVec
	healthy     *prometheus.GaugeVec
	classes     *prometheus.CounterVec
	tenants     *prometheus.CounterVec
	genai       genAIMetrics
	series      seriesCache // the per-request series, resolved (metrics_series.go)
}

// latencyBuckets span a refused request (µs) to a long generation (minutes).
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// NewMetrics registers the proxy's series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_requests_total",
			Help: "Requests received, by their one final outcome.",
		}, []string{"outcome"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_rejections_total",
			Help: "Requests gatekeeper answered itself, by reason.",
		}, []string{"reason"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_decisions_total",
			Help: "Refusal decisions, and whether they were enforced (false in observe mode).",
		}, []string{"decision", "enforced"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gatekeeper_request_duration_seconds",
			Help:    "Time from request received to response finished, by outcome.",
			Buckets: latencyBuckets,
		}, []string{"outcome"}),
		ttfb: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gatekeeper_time_to_first_byte_seconds",
			Help:    "Time from request received to the first response byte from the pod.",
			Buckets: latencyBuckets,
		}, []string{"upstream"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gatekeeper_queue_wait_seconds",
			Help:    "Time a request waited for a window slot, by size class (short: estimate at most 1024 tokens).",
			Buckets: latencyBuckets,
		}, []string{"size"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_estimated_tokens_total",
			Help: "Estimated tokens (prompt + max output) of requests sent to each upstream.",
		}, []string{"upstream"}),
		usedTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_tokens_total",
			Help: "Tokens the pods reported in the usage of their 200 responses, by type (prompt, completion).",
		}, []string{"upstream", "type"}),
		usageLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_usage_unknown_total",
			Help: "200 responses from pods whose usage could not be read: absent, too large, compressed or malformed.",
		}, []string{"upstream"}),
		upstreamRes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_upstream_responses_total",
			Help: "Responses and transport errors from pods, by status class (2xx..5xx, error).",
		}, []string{"upstream", "status_class"}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gatekeeper_upstream_healthy",
			Help: "1 while the pod's active health check passes.",
		}, []string{"upstream"}),
		classes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_class_requests_total",
			Help: "Requests by traffic class and their one outcome (only with classes in the policy).",
		}, []string{"class", "outcome"}),
		tenants: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_tenant_service_tokens_total",
			Help: "Weighted tokens (fairness.input_weight × prompt + output_weight × completion) charged to each tenant's fair share, by tenant: fairness.tenants by name, the rest as other, requests without a tenant as anonymous (only with fairness in the policy).",
		}, []string{"tenant"}),
	}
	reg.MustRegister(m.requests, m.rejections, m.decisions, m.duration, m.ttfb,
		m.queueWait, m.tokens, m.usedTokens, m.usageLost, m.upstreamRes, m.healthy, m.classes, m.tenants)
	m.genai = newGenAIMetrics(reg)
	// Series whose label values are known now start at 0, so rate() and
	// alerts see them before the first event: resolving the per-request
	// ones (every outcome's, the queue waits') creates them.
	m.resolveFixed()
	for _, r := range decide.Reasons {
		m.rejections.WithLabelValues(string(r))
	}
	for _, r := range decide.DecisionReasons {
		m.DeclareDecision(string(r))
	}
	return m
}

// TenantService counts a tenant's weighted tokens (decide.Recorder).
func (m *Metrics) TenantService(tenant string, service int64) {
	if m != nil && service > 0 {
		m.tenants.WithLabelValues(tenant).Add(float64(service))
	}
}

// DeclareDecision creates the decision's series at 0, enforced or not, so
// they exist before the first decision.
func (m *Metrics) DeclareDecision(decision string) {
	if m != nil {
		m.decisions.WithLabelValues(decision, "true")
		m.decisions.WithLabelValues(decision, "false")
	}
}

// upstreamsSet creates the series of every upstream at 0 (its responses,
// one per status class; its tokens, usage and time to first byte) and
// drops those of removed upstreams, so pods that come and go with
// discovery leave no series behind.
func (m *Metrics) UpstreamsSet(names, removed []string) {
	if m == nil {
		return
	}
	for _, name := range removed {
		for _, v := range []interface {
			DeletePartialMatch(prometheus.Labels) int
		}{m.upstreamRes, m.tokens, m.usedTokens, m.usageLost, m.ttfb} {
			v.DeletePartialMatch(prometheus.Labels{"upstream": name})
		}
	}
	m.setUpstreams(names) // which creates each pod's response series
}

// shortRequestTokens splits queue waits into short and long requests.
const shortRequestTokens = 1024

func (m *Metrics) Outcome(o decide.Outcome, d time.Duration) {
	if m == nil {
		return
	}
	s, ok := m.series.outcomes[o]
	if !ok {
		s = m.outcomeSeries(o)
	}
	s.requests.Inc()
	s.duration.Observe(d.Seconds())
}

func (m *Metrics) ClassOutcome(class string, o decide.Outcome) {
	if m != nil {
		m.classes.WithLabelValues(class, string(o)).Inc()
	}
}

func (m *Metrics) Rejected(r decide.Reason) {
	if m != nil {
		m.rejections.WithLabelValues(string(r)).Inc()
	}
}

// Decided counts one decision (a refusal reason, or a window resize the slow
// breaker made) and whether it was enforced: false in observe mode.
func (m *Metrics) Decided(decision string, enforced bool) {
	if m == nil {
		return
	}
	e := "true"
	if !enforced {
		e = "false"
	}
	m.decisions.WithLabelValues(decision, e).Inc()
}

func (m *Metrics) Waited(tokens int64, d time.Duration) {
	if m == nil {
		return
	}
	o := m.series.long
	if tokens <= shortRequestTokens {
		o = m.series.short
	}
	o.Observe(d.Seconds())
}

func (m *Metrics) Sent(upstream string, tokens int64) {
	switch s := m.upstream(upstream); {
	case s != nil:
		s.tokens.Add(float64(tokens))
	case m != nil:
		m.tokens.WithLabelValues(upstream).Add(float64(tokens))
	}
}

// usage counts the tokens a pod reported for one 200 response, or that it
// could not be read.
func (m *Metrics) Usage(upstream string, u usage.Tokens) {
	s := m.upstream(upstream)
	switch {
	case s != nil && u.Known:
		s.prompt.Add(float64(u.Prompt))
		s.completion.Add(float64(u.Completion))
	case s != nil:
		s.usageLost.Inc()
	case m == nil:
	case u.Known:
		m.usedTokens.WithLabelValues(upstream, "prompt").Add(float64(u.Prompt))
		m.usedTokens.WithLabelValues(upstream, "completion").Add(float64(u.Completion))
	default:
		m.usageLost.WithLabelValues(upstream).Inc()
	}
}

func (m *Metrics) firstByte(upstream string, d time.Duration) {
	switch s := m.upstream(upstream); {
	case s != nil:
		s.ttfb.Observe(d.Seconds())
	case m != nil:
		m.ttfb.WithLabelValues(upstream).Observe(d.Seconds())
	}
}

func (m *Metrics) Response(upstream string, status int) {
	switch s := m.upstream(upstream); {
	case s != nil:
		s.responses[statusClass(status)].Inc()
	case m != nil:
		m.upstreamRes.WithLabelValues(upstream, statusClasses[statusClass(status)]).Inc()
	}
}

func (m *Metrics) Health(upstream string, ok bool) {
	if m == nil {
		return
	}
	v := 0.0
	if ok {
		v = 1
	}
	m.healthy.WithLabelValues(upstream).Set(v)
}

// statusClasses are the status_class values of an upstream's responses: a
// status's hundreds, or error for a transport error.
var statusClasses = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx", "error"}
