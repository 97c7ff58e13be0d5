package scale

import (
	"math"
	"time"
)

// Input is what a pool did during one interval.
type Input struct {
	// Arrivals is the requests per second that arrived for the pool,
	// served or not.
	Arrivals float64 `json:"arrivals_per_second"`
	// Refused is the part of Arrivals the pool could not serve, per second,
	// by cause (queue_full, deadline, overloaded, no_memory, shed...).
	Refused map[string]float64 `json:"refused_per_second,omitempty"`
	// Queue is how many requests wait for a slot now.
	Queue int `json:"queue"`
	// Cut is how many of the pool's windows pressure holds below their
	// largest size now.
	Cut int `json:"windows_cut"`
	// PodRates is each pod's service rate (requests released per second).
	PodRates map[string]float64 `json:"pod_rates,omitempty"`
	// Pods is how many pods the pool has now.
	Pods int `json:"pods"`
}

// unserved is the sum of Refused.
func (in Input) unserved() float64 {
	var n float64
	for _, v := range in.Refused {
		n += v
	}
	return n
}

// saturated reports whether the pool turned demand away or held it back:
// then its pods run at what they sustain.
func (in Input) saturated() bool { return in.Queue > 0 || in.Cut > 0 || in.unserved() > 0 }

// Reasons an Estimate holds the current count.
const (
	// NoData: no interval has been observed yet.
	noData = "no_data"
	// NoPodRate: no pod has served anything yet and Settings.PodRate is 0,
	// so demand cannot be turned into pods.
	noPodRate = "no_pod_rate"
)

// Estimate is an Estimator's answer for one interval.
type Estimate struct {
	// Desired is the replica count to run: Recommended after the
	// stabilization window, within [MinReplicas, MaxReplicas].
	Desired int `json:"desired"`
	// Current is the pool's pod count.
	Current int `json:"current"`
	// Recommended is this interval's count before stabilization.
	Recommended int `json:"recommended"`
	// Forecast is the arrivals per second forecast one horizon ahead.
	Forecast float64 `json:"forecast_per_second"`
	// Demand is Forecast plus the queue drained within the horizon.
	Demand float64 `json:"demand_per_second"`
	// PodRate is the requests per second one pod is taken to sustain.
	PodRate float64 `json:"pod_rate"`
	// Hold, when not "", says why Desired is the current count held within
	// the bounds: NoData or NoPodRate.
	Hold string `json:"hold,omitempty"`
	// Inputs is what the interval observed.
	Inputs Input `json:"inputs"`
	// At is when it was made.
	At time.Time `json:"at"`
}

// rec is one recommendation remembered for the stabilization window.
type rec struct {
	at time.Time
	n  int
}

// Estimator is one pool's scaling state. Create one with NewEstimator. Not
// safe for concurrent use (a Scaler guards its estimators).
type Estimator struct {
	s       Settings
	holt    holt
	podRate float64 // learned, when Settings.PodRate is 0
	recs    []rec   // recommendations within the stabilization window, oldest first
	last    Estimate
}

// NewEstimator returns an Estimator for s, or an error naming each invalid
// field.
func NewEstimator(s Settings) (*Estimator, error) {
	s, err := s.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Estimator{s: s, holt: holt{alpha: s.Alpha, beta: s.Beta}}, nil
}

// ObserveAt folds one interval's input, observed at now, into the forecast
// and returns the estimate. Without a sample or a pod rate it holds the
// current count (within the bounds) and says why in Hold.
func (e *Estimator) ObserveAt(now time.Time, in Input) Estimate {
	e.holt.Add(in.Arrivals)
	e.learn(in)
	est := Estimate{Current: in.Pods, Inputs: in, At: now, PodRate: e.rate()}
	steps := float64(e.s.Horizon) / float64(e.s.Interval)
	est.Forecast = e.holt.forecast(steps)
	est.Demand = est.Forecast + float64(in.Queue)/e.s.Horizon.Seconds()
	if est.PodRate <= 0 {
		est.Hold = noPodRate
		est.Desired = e.clamp(in.Pods)
		est.Recommended = est.Desired
		e.last = est
		return est
	}
	est.Recommended = e.clamp(int(math.Ceil(est.Demand/(est.PodRate*e.s.TargetUtilization) - 1e-9)))
	est.Desired = e.stabilize(now, est.Recommended)
	e.last = est
	return est
}

// hold is the estimate before any interval was observed: the current count
// within the bounds.
func (e *Estimator) hold(now time.Time, pods int) Estimate {
	n := e.clamp(pods)
	return Estimate{Desired: n, Recommended: n, Current: pods, Hold: noData, At: now, Inputs: Input{Pods: pods}}
}

// rate is the per-pod sustainable rate in use.
func (e *Estimator) rate() float64 {
	if e.s.PodRate > 0 {
		return e.s.PodRate
	}
	return e.podRate
}

// learn updates the learned pod rate: a lower bound from any busy pod, the
// busiest pod's rate itself while the pool is saturated (pressure may have
// lowered what a pod sustains).
func (e *Estimator) learn(in Input) {
	var top float64
	for _, r := range in.PodRates {
		top = max(top, r)
	}
	if top <= 0 {
		return
	}
	if in.saturated() {
		e.podRate = top
		return
	}
	e.podRate = max(e.podRate, top)
}

// stabilize remembers n and returns the highest recommendation of the
// stabilization window: a rise takes effect at once, a fall only once every
// recommendation of the window is lower (HPA's scale-down stabilization).
func (e *Estimator) stabilize(now time.Time, n int) int {
	cut := now.Add(-e.s.Stabilization)
	i := 0
	for i < len(e.recs) && !e.recs[i].at.After(cut) {
		i++
	}
	e.recs = append(e.recs[i:], rec{at: now, n: n})
	out := n
	for _, r := range e.recs {
		out = max(out, r.n)
	}
	return out
}

func (e *Estimator) clamp(n int) int { return min(max(n, e.s.MinReplicas), e.s.MaxReplicas) }
