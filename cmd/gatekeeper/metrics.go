package main

import (
	"github.com/prometheus/client_golang/prometheus"
)

// appMetrics are the series the command owns itself.
type appMetrics struct {
	breakerTransitions *prometheus.CounterVec
}

func newAppMetrics(reg prometheus.Registerer) *appMetrics {
	m := &appMetrics{
		breakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_error_breaker_transitions_total",
			Help: "Error breaker transitions per upstream, by the state entered.",
		}, []string{"upstream", "state"}),
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "gatekeeper_build_info",
		Help:        "Always 1; the version label says which gatekeeper runs.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	info.Set(1)
	reg.MustRegister(m.breakerTransitions, info)
	return m
}
