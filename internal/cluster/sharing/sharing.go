// Package sharing runs package cluster inside a gatekeeper: the Cluster
// (this replica's lease on each pod's window, which cluster.Windows scales
// to), its Gate (the request path's buckets over every replica), and what
// a switch of mode reports: the gauges, one log line, a lifecycle step.
// Package cluster itself neither logs nor exports metrics.
package sharing

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/cluster"
)

// Settings configures a Sharing.
type Settings struct {
	// Cluster is the cluster's own settings; OnChange, Demand and OnShares
	// are the Sharing's.
	Cluster cluster.Settings
	// Limits are the fast breaker's buckets the Gate shares.
	Limits breaker.LimiterSettings
	// Windows are scaled to this replica's share; their Demand is the
	// heartbeat's. Required.
	Windows *cluster.Windows
	// Log receives the mode switches. Nil means discard.
	Log *slog.Logger
	// Registerer receives gatekeeper_cluster_up and
	// gatekeeper_cluster_window_share. Nil: not registered.
	Registerer prometheus.Registerer
	// Step, if set, hears "cluster_up" and "cluster_down" (tests).
	Step func(string)
}

// Sharing is one replica's part in the cluster. Create one with New; it
// connects nothing until Run's first heartbeat switches to shared mode;
// until then, and whenever Redis fails, the replica takes its share. Safe
// for concurrent use; must not be copied.
type Sharing struct {
	c    *cluster.Cluster
	gate *cluster.Gate
	s    Settings
	up   prometheus.Gauge
	// share is this replica's lease on each pod's window, in slots of its
	// max_inflight.
	share *prometheus.GaugeVec

	// mu guards series.
	mu     sync.Mutex
	series map[string]bool // the pods share has a series for
}

// New builds the Cluster and its Gate.
func New(s Settings) (*Sharing, error) {
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	sh := &Sharing{s: s}
	sh.up = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gatekeeper_cluster_up",
		Help: "1 while limits and windows are shared with the other replicas through Redis; 0 while this replica takes its share alone."})
	sh.share = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gatekeeper_cluster_window_share",
		Help: "This replica's lease on each upstream's window, in slots of its max_inflight (the replicas' leases sum to at most max_inflight)."},
		[]string{"upstream"})
	if s.Registerer != nil {
		s.Registerer.MustRegister(sh.up, sh.share)
	}
	cs := s.Cluster
	cs.OnChange = sh.changed
	cs.Demand = s.Windows.Demand
	cs.OnShares = func() {
		sh.gauges()
		s.Windows.Reshare()
	}
	var err error
	if sh.c, err = cluster.New(cs); err != nil {
		return nil, err
	}
	if sh.gate, err = sh.c.NewGate(cluster.GateSettings{Limits: s.Limits}); err != nil {
		return nil, err
	}
	return sh, nil
}

// Cluster is this replica's handle on the shared state.
func (sh *Sharing) Cluster() *cluster.Cluster { return sh.c }

// Gate is the request path's buckets over every replica.
func (sh *Sharing) Gate() *cluster.Gate { return sh.gate }

// Ready is /readyz's cluster condition: a replica that holds no share of
// any pod's window (a new Redis's first lease time, a new replica before
// its first grant) can admit nothing, so load balancers should wait. In
// observe mode (observe true) nothing is bounded, so it is always ready.
func (sh *Sharing) Ready(observe bool) error {
	if observe || sh.c.Holding() {
		return nil
	}
	return errors.New("holding no share of any upstream's window yet (cluster: waiting for a lease)")
}

// changed is the cluster's OnChange: the gauge, the fallback buckets
// resized to this replica's share when Redis is lost, one log line.
func (sh *Sharing) changed(up bool) {
	if up {
		sh.up.Set(1)
		sh.s.Log.LogAttrs(context.Background(), slog.LevelInfo, "cluster: sharing limits and windows through Redis",
			slog.String("state", "shared"), slog.Int("replicas", sh.c.LastReplicas()))
		sh.step("cluster_up")
		return
	}
	sh.up.Set(0)
	sh.gate.Reshare()
	sh.s.Log.LogAttrs(context.Background(), slog.LevelWarn, "cluster: Redis unreachable; this replica takes its share of every limit",
		slog.String("state", "local"), slog.Int("replicas", sh.c.LastReplicas()))
	sh.step("cluster_down")
}

func (sh *Sharing) step(name string) {
	if sh.s.Step != nil {
		sh.s.Step(name)
	}
}

// gauges sets the share gauge from the leases, a removed pod's series
// dropped.
func (sh *Sharing) gauges() {
	snap := sh.c.Snapshot() // OnShares runs once SetPods has, after New returned
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for pod := range sh.series {
		if _, ok := snap.Shares[pod]; !ok {
			sh.share.DeleteLabelValues(pod)
			delete(sh.series, pod)
		}
	}
	if sh.series == nil {
		sh.series = map[string]bool{}
	}
	for pod, s := range snap.Shares {
		sh.share.WithLabelValues(pod).Set(float64(s.Cap))
		sh.series[pod] = true
	}
}

// Run beats until ctx ends (the heartbeat that counts replicas and renews
// this replica's leases), then leaves and closes the connection.
func (sh *Sharing) Run(ctx context.Context) {
	_ = sh.c.Run(ctx)
	_ = sh.c.Close()
}
