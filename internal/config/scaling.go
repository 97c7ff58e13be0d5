package config

import (
	"math"
	"time"
)

// Scaling exports a scaling signal (docs/scaling.md): how many pods each
// pool should run one pod start time from now, as
// gatekeeper_desired_replicas{pool} and GET /admin/scale, for KEDA or an
// HPA to act on. Optional: without it (the default) no signal is computed.
// Gatekeeper scales nothing itself. Restart-only.
type Scaling struct {
	// Interval is how often each pool is sampled (0: 15s; at least 1s).
	Interval time.Duration `yaml:"interval"`
	// PodStartTime is how long a new pod takes to serve (scheduling, image
	// pull, weights loaded, warm-up): the horizon arrivals are forecast
	// over (0: 3m; at least interval).
	PodStartTime time.Duration `yaml:"pod_start_time"`
	// MinReplicas is the fewest pods the signal asks for (0: 1).
	MinReplicas int `yaml:"min_replicas"`
	// MaxReplicas is the most pods the signal asks for (0: max(10,
	// min_replicas); at least min_replicas).
	MaxReplicas int `yaml:"max_replicas"`
	// Stabilization is how long the desired count must have stayed lower
	// before it falls, as an HPA's scale-down stabilization window (0: 5m);
	// a rise is exported at once.
	Stabilization time.Duration `yaml:"stabilization"`
	// TargetUtilization is the fraction of a pod's sustainable rate the
	// count is sized for (0: 0.8; in (0, 1]).
	TargetUtilization float64 `yaml:"target_utilization"`
	// PodRate is the requests per second one pod sustains (0: learned from
	// the pods' service rates, the busiest pod's while the pool is
	// saturated; not negative).
	PodRate float64 `yaml:"pod_rate"`
	// Alpha is Holt's smoothing factor of the arrivals' level (0: 0.5; in
	// (0, 1]): higher follows a change sooner and smooths less.
	Alpha float64 `yaml:"alpha"`
	// Beta is Holt's smoothing factor of the arrivals' trend (0: 0.3; in
	// (0, 1]).
	Beta float64 `yaml:"beta"`
}

func (k *checker) scaling(s *Scaling) {
	if s == nil {
		return
	}
	if s.Interval != 0 && s.Interval < time.Second {
		k.add("scaling.interval", "must be at least 1s, got %v", s.Interval)
	}
	interval := s.Interval
	if interval == 0 {
		interval = 15 * time.Second
	}
	if s.PodStartTime != 0 && s.PodStartTime < interval {
		k.add("scaling.pod_start_time", "must be at least scaling.interval (%v), got %v", interval, s.PodStartTime)
	}
	if s.MinReplicas < 0 {
		k.add("scaling.min_replicas", "must not be negative, got %d", s.MinReplicas)
	}
	if s.MaxReplicas < 0 || (s.MaxReplicas != 0 && s.MaxReplicas < s.MinReplicas) {
		k.add("scaling.max_replicas", "must be at least scaling.min_replicas (%d), got %d", s.MinReplicas, s.MaxReplicas)
	}
	if s.Stabilization < 0 {
		k.add("scaling.stabilization", "must not be negative, got %v", s.Stabilization)
	}
	for _, f := range []struct {
		path string
		v    float64
	}{{"scaling.target_utilization", s.TargetUtilization}, {"scaling.alpha", s.Alpha}, {"scaling.beta", s.Beta}} {
		if f.v < 0 || f.v > 1 || math.IsNaN(f.v) {
			k.add(f.path, "must be within (0, 1] (0: the default), got %v", f.v)
		}
	}
	if s.PodRate < 0 || math.IsNaN(s.PodRate) || math.IsInf(s.PodRate, 0) {
		k.add("scaling.pod_rate", "must be a finite number ≥ 0, got %v", s.PodRate)
	}
}
