package replay

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/scale"
)

// Scaling says what sizes the pool during a run (Settings.Autoscale).
type Scaling int

// The ways to size the pool.
const (
	// StaticPool keeps Settings.Pods pods throughout.
	StaticPool Scaling = iota
	// ScaleGatekeeper follows gatekeeper_desired_replicas: internal/scale's
	// Estimator, fed every interval with what gatekeeper's metrics count
	// (requests received, refused for capacity by reason, each pod's
	// answers, the queue, the windows cut by pressure, the pods), as
	// scale.Gather and the Scaler turn them into its Input.
	ScaleGatekeeper
	// ScaleKVUsage is an HPA on the pods' mean kv_cache_usage alone:
	// ⌈pods × mean usage ÷ target⌉ (Kubernetes' formula), with the same
	// bounds and scale-down stabilization.
	ScaleKVUsage
)

// String returns the scaling's name as -autoscale spells it.
func (s Scaling) String() string {
	switch s {
	case StaticPool:
		return "static"
	case ScaleGatekeeper:
		return "gatekeeper"
	case ScaleKVUsage:
		return "kv-usage"
	}
	return "unknown"
}

// ParseScaling is the scaling String names.
func ParseScaling(name string) (Scaling, error) {
	for _, s := range []Scaling{StaticPool, ScaleGatekeeper, ScaleKVUsage} {
		if s.String() == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("replay: unknown scaling %q (want static, gatekeeper or kv-usage)", name)
}

// AutoscaleSettings size the pool during a run. The zero value is a static
// pool of Settings.Pods.
type AutoscaleSettings struct {
	Mode Scaling
	// Scale is the estimator's settings (interval, horizon, bounds,
	// stabilization, target utilization), its zero fields the product's
	// defaults; ScaleKVUsage uses the interval, bounds, stabilization and
	// TargetUtilization (its target mean usage) of it too.
	Scale scale.Settings
	// StartDelay is how long a pod asked for takes to serve (scheduling,
	// image, weights, warm-up); its GPU counts from the ask. 0 means
	// Scale.Horizon (3m by default: the estimator forecasts that far).
	StartDelay time.Duration
}

// scaler is the run's autoscaler.
type scaler struct {
	s     AutoscaleSettings
	est   *scale.Estimator
	next  time.Duration // the next sample
	prev  scaleCounts
	recs  []scaleRec // ScaleKVUsage's recommendations in the stabilization window
	ready []time.Duration
	// Desired is every sample's desired count, for the result.
	desired []int
}

// scaleCounts are the counters gatekeeper's metrics hold, at one sample.
type scaleCounts struct {
	arrivals float64
	refused  map[string]float64
	served   map[string]float64
}

type scaleRec struct {
	at time.Duration
	n  int
}

func newScaler(s AutoscaleSettings) (*scaler, error) {
	def, err := scale.NewEstimator(s.Scale)
	if err != nil {
		return nil, err
	}
	if s.Scale.Interval == 0 {
		s.Scale.Interval = 15 * time.Second
	}
	if s.Scale.Horizon == 0 {
		s.Scale.Horizon = 3 * time.Minute
	}
	if s.Scale.Stabilization == 0 {
		s.Scale.Stabilization = 5 * time.Minute
	}
	if s.Scale.TargetUtilization == 0 {
		s.Scale.TargetUtilization = 0.8
	}
	if s.Scale.MinReplicas == 0 {
		s.Scale.MinReplicas = 1
	}
	if s.Scale.MaxReplicas == 0 {
		s.Scale.MaxReplicas = max(10, s.Scale.MinReplicas)
	}
	if s.StartDelay == 0 {
		s.StartDelay = s.Scale.Horizon
	}
	return &scaler{s: s, est: def, next: s.Scale.Interval}, nil
}

// counts reads what gatekeeper's metrics would hold now.
func (r *runner) scaleCounts() scaleCounts {
	o := r.res.Outcomes
	c := scaleCounts{arrivals: float64(r.res.Attempts), served: map[string]float64{},
		refused: map[string]float64{"overloaded": float64(o.Overloaded), "queue_full": float64(o.QueueFull),
			"queue_timeout": float64(o.QueueTimeout), "deadline": float64(o.Deadline)}}
	for _, p := range r.pods {
		c.served[p.name] = float64(p.released)
	}
	return c
}

// autoscale samples the pool when due and starts or drains pods toward
// the desired count; it also brings up the pods whose start is over.
func (r *runner) autoscale() {
	sc := r.scale
	if sc == nil {
		return
	}
	r.accrue(r.t)
	for len(sc.ready) > 0 && sc.ready[0] <= r.t {
		sc.ready = sc.ready[1:]
		r.addPod()
	}
	if r.t < sc.next {
		return
	}
	d := sc.s.Scale.Interval
	sc.next += d
	want := r.desired(d)
	sc.desired = append(sc.desired, want)
	have := len(r.pods) + len(sc.ready)
	for ; have < want; have++ {
		sc.ready = append(sc.ready, r.t+sc.s.StartDelay)
	}
	for ; have > want && len(sc.ready) > 0; have-- { // not started yet: cancelled
		sc.ready = sc.ready[:len(sc.ready)-1]
	}
	for ; have > want && len(r.pods) > 1; have-- {
		r.drainPod()
	}
}

// desired is this sample's desired count, d after the last.
func (r *runner) desired(d time.Duration) int {
	sc := r.scale
	if sc.s.Mode == ScaleKVUsage {
		return r.kvDesired()
	}
	cur := r.scaleCounts()
	secs := d.Seconds()
	per := func(a, b float64) float64 { return max(0, b-a) / secs }
	in := scale.Input{Arrivals: per(sc.prev.arrivals, cur.arrivals), Queue: r.core.Len(), Pods: len(r.pods),
		PodRates: map[string]float64{}}
	for cause, n := range cur.refused {
		if v := per(sc.prev.refused[cause], n); v > 0 {
			if in.Refused == nil {
				in.Refused = map[string]float64{}
			}
			in.Refused[cause] = v
		}
	}
	for name, n := range cur.served {
		in.PodRates[name] = per(sc.prev.served[name], n)
	}
	for _, p := range r.pods {
		if st, _, _ := r.ctl.State(p.name); st.Level > breaker.Normal {
			in.Cut++
		}
	}
	sc.prev = cur
	return sc.est.ObserveAt(r.now(), in).Desired
}

// kvDesired is the HPA's count on the running pods' mean KV usage, held
// up for the stabilization window.
func (r *runner) kvDesired() int {
	sc := r.scale
	var sum float64
	for _, p := range r.pods {
		if p.e.Alive() {
			sum += p.e.Metrics().KVCacheUsage
		}
	}
	s := sc.s.Scale
	n := int(math.Ceil(sum/s.TargetUtilization - 1e-9))
	n = min(max(n, s.MinReplicas), s.MaxReplicas)
	cut := r.t - s.Stabilization
	sc.recs = slices.DeleteFunc(append(sc.recs, scaleRec{r.t, n}), func(x scaleRec) bool { return x.at <= cut })
	for _, x := range sc.recs {
		n = max(n, x.n)
	}
	return n
}

// starting counts the pods asked for and not serving yet.
func (r *runner) starting() int {
	if r.scale == nil {
		return 0
	}
	return len(r.scale.ready)
}
