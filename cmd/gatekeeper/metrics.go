package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/relief"
)

// appMetrics are the series the command owns itself.
type appMetrics struct {
	breakerTransitions *prometheus.CounterVec
	levelTransitions   *prometheus.CounterVec
	hookCalls          *prometheus.CounterVec
}

func newAppMetrics(reg prometheus.Registerer) *appMetrics {
	m := &appMetrics{
		breakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_error_breaker_transitions_total",
			Help: "Error breaker transitions per upstream, by the state entered.",
		}, []string{"upstream", "state"}),
		levelTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_level_transitions_total",
			Help: "Pressure level changes per upstream, with the signal that caused them.",
		}, []string{"upstream", "from", "to", "signal"}),
		hookCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_hook_calls_total",
			Help: "Relief hook calls by level hook and result (ok, error, timeout, skipped, canceled).",
		}, []string{"hook", "result"}),
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "gatekeeper_build_info",
		Help:        "Always 1; the version label says which gatekeeper runs.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	info.Set(1)
	for _, hook := range []control.Hook{control.Degraded, control.Critical, control.Recovered} {
		for _, result := range relief.Outcomes { // 15 series, there from the start
			m.hookCalls.WithLabelValues(string(hook), result)
		}
	}
	reg.MustRegister(m.breakerTransitions, m.levelTransitions, m.hookCalls, info)
	return m
}
