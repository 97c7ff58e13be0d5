package main

import (
	"context"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/cluster"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/policy"
)

var (
	_ decide.Limiter      = (*cluster.Gate)(nil)
	_ decide.ClassLimiter = (*cluster.Keyed)(nil)
	_ decide.ModelLimiter = (*cluster.Keyed)(nil)
)

// shared wires package cluster into the app: the Cluster (this replica's
// lease on each pod's window, which cluster.Windows scales) and its Gate (the request
// path's buckets over every replica), and what a switch of mode reports
// (the gauge, one log line, the lifecycle step).
type shared struct {
	c    *cluster.Cluster
	gate *cluster.Gate
	log  *slog.Logger
	up   prometheus.Gauge
	// share is this replica's lease on each pod's window, in slots of its
	// max_inflight.
	share *prometheus.GaugeVec
	step  func(name string) // the app's lifecycle hook: "cluster_up", "cluster_down"

	mu     sync.Mutex
	series map[string]bool // the pods share has a series for
}

// newShared connects nothing yet: run's first heartbeat switches to shared
// mode; until then, and whenever Redis fails, each replica takes its share.
func newShared(cfg *config.Config, limits breaker.LimiterSettings, windows *cluster.Windows,
	log *slog.Logger, reg prometheus.Registerer, step func(string)) (*shared, error) {
	s := &shared{log: log, step: step}
	s.up = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gatekeeper_cluster_up",
		Help: "1 while limits and windows are shared with the other replicas through Redis; 0 while this replica takes its share alone."})
	s.share = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gatekeeper_cluster_window_share",
		Help: "This replica's lease on each upstream's window, in slots of its max_inflight (the replicas' leases sum to at most max_inflight)."},
		[]string{"upstream"})
	reg.MustRegister(s.up, s.share)
	cs := policy.ClusterSettings(cfg.Cluster)
	cs.OnChange = s.changed
	cs.Demand = windows.Demand
	cs.OnShares = func() {
		s.gauges()
		windows.Reshare()
	}
	var err error
	if s.c, err = cluster.New(cs); err != nil {
		return nil, err
	}
	if s.gate, err = s.c.NewGate(cluster.GateSettings{Limits: limits}); err != nil {
		return nil, err
	}
	return s, nil
}

// changed is the cluster's OnChange: the gauge, the fallback buckets
// resized to this replica's share when Redis is lost, one log line.
func (s *shared) changed(up bool) {
	if up {
		s.up.Set(1)
		s.log.LogAttrs(context.Background(), slog.LevelInfo, "cluster: sharing limits and windows through Redis",
			slog.String("state", "shared"), slog.Int("replicas", s.c.LastReplicas()))
		s.step("cluster_up")
		return
	}
	s.up.Set(0)
	s.gate.Reshare()
	s.log.LogAttrs(context.Background(), slog.LevelWarn, "cluster: Redis unreachable; this replica takes its share of every limit",
		slog.String("state", "local"), slog.Int("replicas", s.c.LastReplicas()))
	s.step("cluster_down")
}

// gauges sets the share gauge from the leases, a removed pod's series
// dropped.
func (s *shared) gauges() {
	snap := s.c.Snapshot() // OnShares runs once SetPods has, after New returned
	s.mu.Lock()
	defer s.mu.Unlock()
	for pod := range s.series {
		if _, ok := snap.Shares[pod]; !ok {
			s.share.DeleteLabelValues(pod)
			delete(s.series, pod)
		}
	}
	if s.series == nil {
		s.series = map[string]bool{}
	}
	for pod, sh := range snap.Shares {
		s.share.WithLabelValues(pod).Set(float64(sh.Cap))
		s.series[pod] = true
	}
}

// run beats until ctx ends (the heartbeat that counts replicas and renews
// this replica's leases), then leaves and closes the connection.
func (s *shared) run(ctx context.Context) {
	_ = s.c.Run(ctx)
	_ = s.c.Close()
}
