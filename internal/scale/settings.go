package scale

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Settings configures an Estimator and a Scaler. The zero value selects the
// defaults.
type Settings struct {
	// Interval is how often the pool is sampled. 0 means 15s; at least 1s.
	Interval time.Duration
	// Horizon is how far ahead arrivals are forecast: a pod's start time
	// (scheduling, image pull, weights loaded, warm-up), so that a pod asked
	// for now serves the load it was asked for. 0 means 3m; at least
	// Interval.
	Horizon time.Duration
	// MinReplicas and MaxReplicas bound the desired count. 0 means 1 and 10;
	// 1 ≤ MinReplicas ≤ MaxReplicas.
	MinReplicas, MaxReplicas int
	// Stabilization is how long the desired count must have stayed lower
	// before it falls (Kubernetes HPA's scale-down stabilization window).
	// 0 means 5m; negative is invalid.
	Stabilization time.Duration
	// TargetUtilization is the fraction of a pod's sustainable rate the
	// count is sized for: headroom for what the forecast misses. 0 means
	// 0.8; in (0, 1].
	TargetUtilization float64
	// Alpha and Beta are Holt's smoothing factors of the level and the
	// trend of arrivals (Holt). 0 means 0.5 and 0.3; each in (0, 1].
	Alpha, Beta float64
	// PodRate is the requests per second one pod sustains. 0 means learn
	// it: the highest per-pod service rate seen, replaced by the busiest
	// pod's rate whenever the pool is saturated (a queue, a refusal or a
	// window cut). Not negative.
	PodRate float64
	// Now returns the current time (Scaler only). Nil means time.Now.
	Now func() time.Time
}

// Defaults of Settings.
const (
	defaultInterval          = 15 * time.Second
	defaultHorizon           = 3 * time.Minute
	defaultMinReplicas       = 1
	defaultMaxReplicas       = 10
	defaultStabilization     = 5 * time.Minute
	defaultTargetUtilization = 0.8
	defaultAlpha             = 0.5
	defaultBeta              = 0.3
)

// withDefaults fills the zero fields and checks the result, naming every
// bad field.
func (s Settings) withDefaults() (Settings, error) {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	deff := func(f *float64, v float64) {
		if *f == 0 {
			*f = v
		}
	}
	def(&s.Interval, defaultInterval)
	def(&s.Horizon, defaultHorizon)
	def(&s.Stabilization, defaultStabilization)
	deff(&s.TargetUtilization, defaultTargetUtilization)
	deff(&s.Alpha, defaultAlpha)
	deff(&s.Beta, defaultBeta)
	if s.MinReplicas == 0 {
		s.MinReplicas = defaultMinReplicas
	}
	if s.MaxReplicas == 0 {
		s.MaxReplicas = max(defaultMaxReplicas, s.MinReplicas)
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("scale: %s: "+format, append([]any{field}, args...)...))
	}
	if s.Interval < time.Second {
		bad("Interval", "must be at least 1s, got %v", s.Interval)
	}
	if s.Horizon < s.Interval {
		bad("Horizon", "must be at least Interval (%v), got %v", s.Interval, s.Horizon)
	}
	if s.MinReplicas < 1 || s.MaxReplicas < s.MinReplicas {
		bad("MinReplicas", "must satisfy 1 ≤ MinReplicas ≤ MaxReplicas, got %d and %d", s.MinReplicas, s.MaxReplicas)
	}
	if s.Stabilization < 0 {
		bad("Stabilization", "must not be negative, got %v", s.Stabilization)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"TargetUtilization", s.TargetUtilization}, {"Alpha", s.Alpha}, {"Beta", s.Beta}} {
		if !(f.v > 0 && f.v <= 1) {
			bad(f.name, "must be within (0, 1], got %v", f.v)
		}
	}
	if s.PodRate < 0 || math.IsNaN(s.PodRate) || math.IsInf(s.PodRate, 0) {
		bad("PodRate", "must be a finite number ≥ 0, got %v", s.PodRate)
	}
	return s, errors.Join(errs...)
}
