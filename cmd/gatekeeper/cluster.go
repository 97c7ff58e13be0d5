package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatekeeper-dev/gatekeeper/breaker"
	"github.com/gatekeeper-dev/gatekeeper/cluster"
	"github.com/gatekeeper-dev/gatekeeper/config"
	"github.com/gatekeeper-dev/gatekeeper/proxy"
)

var (
	_ proxy.Limiter      = (*shared)(nil)
	_ proxy.SharedWindow = (*shared)(nil)
)

// shared wires package cluster into the request path: the fast breaker's
// buckets and each pod's window summed over every replica, and this
// replica's share of them while Redis is unreachable. Safe for concurrent
// use; must not be copied.
type shared struct {
	c   *cluster.Cluster
	lim *cluster.Limiter
	// classes and models are the traffic classes' and models' own buckets.
	classes, models *sharedKeyed
	window          func(pod string) int // the pod's window now (the controller's)
	log             *slog.Logger
	up              prometheus.Gauge
	step            func(name string) // the app's lifecycle hook: "cluster_up", "cluster_down"

	// mu guards full and local: the policy's limits and the fallback bucket
	// at this replica's share of them.
	mu    sync.Mutex
	full  breaker.LimiterSettings
	local *breaker.Limiter
}

// clusterSettings maps the policy's cluster section onto cluster.Settings.
func clusterSettings(c *config.Cluster) cluster.Settings {
	return cluster.Settings{URL: c.Redis.URL, PasswordFile: c.Redis.PasswordFile, CAFile: c.Redis.CAFile,
		KeyPrefix: c.KeyPrefix, Timeout: c.Timeout, LeaseTTL: c.LeaseTTL, HeartbeatInterval: c.Heartbeat,
		ReplicaID: c.ReplicaID}
}

// newShared connects nothing yet: Run's first heartbeat switches to shared
// mode; until then, and whenever Redis fails, each replica takes its share.
func newShared(cfg *config.Config, limits breaker.LimiterSettings, window func(string) int,
	log *slog.Logger, reg prometheus.Registerer, step func(string)) (*shared, error) {
	s := &shared{window: window, log: log, full: limits, step: step}
	s.up = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gatekeeper_cluster_up",
		Help: "1 while limits and windows are shared with the other replicas through Redis; 0 while this replica takes its share alone."})
	reg.MustRegister(s.up)
	cs := clusterSettings(cfg.Cluster)
	cs.OnChange = s.changed
	var err error
	if s.c, err = cluster.New(cs); err != nil {
		return nil, err
	}
	if s.lim, err = s.c.NewLimiter(sharedLimits(limits)); err != nil {
		return nil, err
	}
	if s.local, err = breaker.NewLimiter(s.shareOf(limits)); err != nil {
		return nil, err
	}
	s.classes = &sharedKeyed{c: s.c, kind: "class"}
	s.models = &sharedKeyed{c: s.c, kind: "model"}
	return s, nil
}

// setKeyed installs the class and model buckets (a start or a reload).
func (s *shared) setKeyed(classes, models map[string]breaker.LimiterSettings) {
	s.classes.set(s, classes)
	s.models.set(s, models)
}

func sharedLimits(l breaker.LimiterSettings) cluster.LimiterSettings {
	return cluster.LimiterSettings{QPS: l.QPS, Burst: l.Burst, ClientQPS: l.ClientQPS, ClientBurst: l.ClientBurst}
}

// shareOf is this replica's part of the policy's limits: rates and bursts
// divided by the replicas last seen alive (at least one token per bucket).
func (s *shared) shareOf(l breaker.LimiterSettings) breaker.LimiterSettings {
	burst := func(b int) int {
		if b == 0 {
			return 0
		}
		return max(1, int(math.Ceil(s.c.Share(float64(b)))))
	}
	l.QPS, l.ClientQPS = s.c.Share(l.QPS), s.c.Share(l.ClientQPS)
	l.Burst, l.ClientBurst = burst(l.Burst), burst(l.ClientBurst)
	return l
}

// update applies a reloaded policy's limits (the window follows the
// controller by itself).
func (s *shared) update(l breaker.LimiterSettings) error {
	if err := s.lim.Update(sharedLimits(l)); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.full = l
	return s.local.Update(s.shareOf(l))
}

// changed is the cluster's OnChange: one log line per switch, the gauge, and
// the fallback bucket resized to this replica's share when Redis is lost.
func (s *shared) changed(up bool) {
	if up {
		s.up.Set(1)
		s.log.LogAttrs(context.Background(), slog.LevelInfo, "cluster: sharing limits and windows through Redis",
			slog.String("state", "shared"), slog.Int("replicas", s.c.LastReplicas()))
		s.step("cluster_up")
		return
	}
	defer s.step("cluster_down")
	s.up.Set(0)
	s.mu.Lock()
	_ = s.local.Update(s.shareOf(s.full)) // validated when set
	s.mu.Unlock()
	for _, k := range []*sharedKeyed{s.classes, s.models} {
		k.mu.Lock()
		k.reshare(s)
		k.mu.Unlock()
	}
	s.log.LogAttrs(context.Background(), slog.LevelWarn, "cluster: Redis unreachable; this replica takes its share of every limit",
		slog.String("state", "local"), slog.Int("replicas", s.c.LastReplicas()))
}

// retryIn is a shared bucket's refusal: 429 with Retry-After.
type retryIn time.Duration

func (r retryIn) Error() string             { return "cluster: rate limited" }
func (r retryIn) RetryAfter() time.Duration { return time.Duration(r) }

// Allow is the fast breaker over every replica: Redis's buckets while it
// answers, this replica's share otherwise. The client key is stored hashed.
func (s *shared) Allow(clientKey string) error {
	key := ""
	if clientKey != "" {
		sum := sha256.Sum256([]byte(clientKey))
		key = hex.EncodeToString(sum[:])
	}
	d, err := s.lim.Allow(context.Background(), key)
	switch {
	case err == nil && d.Allowed:
		return nil
	case err == nil:
		return retryIn(d.Wait)
	case errors.Is(err, cluster.ErrUnavailable):
	default: // not Redis's answer either way: decide locally
	}
	s.mu.Lock()
	l := s.local
	s.mu.Unlock()
	return l.Allow(clientKey)
}

// Acquire leases a slot of pod's window over every replica (see
// cluster.Acquire: this replica's share while Redis is unreachable).
func (s *shared) Acquire(ctx context.Context, pod string) (func(), bool) {
	lease, ok, err := s.c.Acquire(ctx, pod, s.window(pod))
	if err != nil || !ok {
		return nil, false
	}
	return func() { s.c.Release(context.Background(), lease) }, true
}

// run beats until ctx ends (the heartbeat that counts replicas and renews
// this replica's leases), then leaves and closes the connection.
func (s *shared) run(ctx context.Context) {
	_ = s.c.Run(ctx)
	_ = s.c.Close()
}
