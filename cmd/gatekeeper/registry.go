package main

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// registry is the app's Prometheus registry, which also remembers what was
// registered on it, so that docs/metrics.md can be generated from exactly
// the metrics the app exports (metricsdoc_test.go).
type registry struct {
	*prometheus.Registry
	mu         sync.Mutex
	collectors []prometheus.Collector
}

func newRegistry() *registry { return &registry{Registry: prometheus.NewRegistry()} }

// Register registers c and remembers it.
func (r *registry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	r.collectors = append(r.collectors, c)
	r.mu.Unlock()
	return nil
}

// registered returns the collectors registered so far.
func (r *registry) registered() []prometheus.Collector {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]prometheus.Collector(nil), r.collectors...)
}

// MustRegister registers each collector and remembers it; it panics on the
// first that fails, as prometheus.Registry does.
func (r *registry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}
