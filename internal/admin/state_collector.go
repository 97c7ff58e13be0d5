package admin

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// stateCollector exports the queue, windows and error breakers at scrape time.
type stateCollector struct {
	snapshot                           func() State
	queueLen, queueTokens, limit, infl *prometheus.Desc
	ceiling                            *prometheus.Desc
	breakerState, available, level     *prometheus.Desc
	memBudget, memHeld                 *prometheus.Desc
	tenants, tenantWaiting             *prometheus.Desc
}

// NewStateCollector returns a collector that calls snapshot at every scrape
// and exports the queue, each upstream's window, in-flight count, error
// breaker, availability and pressure level from it.
func NewStateCollector(snapshot func() State) prometheus.Collector {
	up := []string{"upstream"}
	return &stateCollector{snapshot: snapshot,
		queueLen:    prometheus.NewDesc("gatekeeper_queue_length", "Requests waiting for a window slot.", nil, nil),
		queueTokens: prometheus.NewDesc("gatekeeper_queue_tokens", "Estimated tokens of the waiting requests.", nil, nil),
		limit:       prometheus.NewDesc("gatekeeper_window_limit", "The most requests the upstream may run at once (its batch window).", up, nil),
		ceiling: prometheus.NewDesc("gatekeeper_window_ceiling",
			"The most the upstream's window may grow to since it failed under load (batch.failure_hold); 0 while none holds.", up, nil),
		infl:         prometheus.NewDesc("gatekeeper_inflight", "Window slots held on the upstream now: the sequences of the requests running there (prompts × n each).", up, nil),
		breakerState: prometheus.NewDesc("gatekeeper_error_breaker_state", "Error breaker state: 0 closed, 1 half-open, 2 open.", up, nil),
		available:    prometheus.NewDesc("gatekeeper_upstream_available", "1 while the upstream may receive new dispatches.", up, nil),
		level:        prometheus.NewDesc("gatekeeper_pressure_level", "Pressure level: 0 normal, 1 degraded, 2 critical.", up, nil),
		memBudget: prometheus.NewDesc("gatekeeper_memory_budget_bytes",
			"Memory admission: the estimated memory the upstream's in-flight requests may hold (a share of the free memory it reports). Absent while it bounds nothing.", up, nil),
		tenants: prometheus.NewDesc("gatekeeper_fair_tenants",
			"Tenants the queue's fair share remembers (fairness on; fairness.max_tenants bounds the idle ones).", nil, nil),
		tenantWaiting: prometheus.NewDesc("gatekeeper_fair_tenant_waiting",
			"Requests waiting for a slot, by the tenant fairness.tenants names and priority (fairness on).", []string{"tenant", "priority"}, nil),
		memHeld: prometheus.NewDesc("gatekeeper_memory_held_bytes",
			"Memory admission: the estimated memory of the upstream's in-flight requests. Absent while it bounds nothing.", up, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.queueLen, c.queueTokens, c.limit, c.ceiling, c.infl, c.breakerState, c.available, c.level, c.memBudget, c.memHeld, c.tenants, c.tenantWaiting} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	ch <- prometheus.MustNewConstMetric(c.queueLen, prometheus.GaugeValue, float64(s.Queue.Length))
	ch <- prometheus.MustNewConstMetric(c.queueTokens, prometheus.GaugeValue, float64(s.Queue.Tokens))
	if t := s.Tenants; t != nil {
		ch <- prometheus.MustNewConstMetric(c.tenants, prometheus.GaugeValue, float64(t.Count))
		for _, ts := range t.List {
			if ts.Waiting > 0 && named(ts.Tenant) { // named ones only: the label set stays the policy's
				ch <- prometheus.MustNewConstMetric(c.tenantWaiting, prometheus.GaugeValue, float64(ts.Waiting), ts.Tenant, strconv.Itoa(ts.Priority))
			}
		}
	}
	for _, u := range s.Upstreams {
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(u.WindowLimit), u.Name)
		ch <- prometheus.MustNewConstMetric(c.ceiling, prometheus.GaugeValue, float64(u.WindowCeiling), u.Name)
		ch <- prometheus.MustNewConstMetric(c.infl, prometheus.GaugeValue, float64(u.InFlight), u.Name)
		ch <- prometheus.MustNewConstMetric(c.breakerState, prometheus.GaugeValue, breakerValue(u.Breaker), u.Name)
		ch <- prometheus.MustNewConstMetric(c.available, prometheus.GaugeValue, boolValue(u.Available), u.Name)
		ch <- prometheus.MustNewConstMetric(c.level, prometheus.GaugeValue, levelValue(u.Level), u.Name)
		if u.MemoryBudgetBytes > 0 {
			ch <- prometheus.MustNewConstMetric(c.memBudget, prometheus.GaugeValue, float64(u.MemoryBudgetBytes), u.Name)
			ch <- prometheus.MustNewConstMetric(c.memHeld, prometheus.GaugeValue, float64(u.MemoryHeldBytes), u.Name)
		}
	}
}

func breakerValue(s string) float64 {
	switch s {
	case "half-open":
		return 1
	case "open":
		return 2
	}
	return 0
}

func levelValue(s string) float64 {
	switch s {
	case "degraded":
		return 1
	case "critical":
		return 2
	}
	return 0
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// named reports whether a queue tenant key is a tenant fairness.tenants
// names (unnamed ones are "sha256:" and a hash prefix; "" is anonymous).
func named(tenant string) bool { return tenant != "" && !strings.HasPrefix(tenant, "sha256:") }
