package scale

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// poolAll names the pool of every pod; with routing by model each model is
// a pool too (GatherPools; docs/scaling.md, pools).
const poolAll = "all"

// Counts is what a pool has done since the process started (Arrivals,
// Refused, Served: counters, which only grow) and holds now (Queue, Cut,
// Pods). A Scaler turns the counters into rates per interval.
type Counts struct {
	// arrivals counts the requests received, served or not.
	arrivals float64
	// refused counts the requests refused, by cause.
	refused map[string]float64
	// served counts the requests each pod released (answered).
	served map[string]float64
	// queue is how many requests wait now.
	queue int
	// cut is how many windows pressure holds below their largest size now.
	cut int
	// pods is how many pods the pool has now.
	pods int
}

// Pool is one pool's latest estimate, as /admin/scale shows it.
type Pool struct {
	Pool string `json:"pool"`
	Estimate
}

// Scaler keeps an Estimator per pool and exports the estimates. Create one
// with New. Safe for concurrent use; must not be copied.
type Scaler struct {
	s                 Settings
	desired, forecast *prometheus.GaugeVec
	// mu guards pools.
	mu    sync.Mutex
	pools map[string]*pool
	// tally is the decision core's per-model counts (GatherPools).
	tally Tally
}

// pool is one pool's estimator and the counts of its last sample.
type pool struct {
	est    *Estimator
	prev   Counts
	prevAt time.Time
	last   Estimate
}

// New returns a Scaler for s whose gauges (gatekeeper_desired_replicas,
// gatekeeper_scale_forecast_arrivals_per_second) are registered on reg, or
// an error naming each invalid field of s.
func New(s Settings, reg prometheus.Registerer) (*Scaler, error) {
	s, err := s.withDefaults()
	if err != nil {
		return nil, err
	}
	sc := &Scaler{s: s, pools: map[string]*pool{},
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gatekeeper_desired_replicas",
			Help: "Pods the pool should run one pod start time (scaling.pod_start_time) from now: forecast arrivals and the queue ÷ a pod's sustainable rate, within scaling's bounds, lowered only after its stabilization window (scaling on).",
		}, []string{"pool"}),
		forecast: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gatekeeper_scale_forecast_arrivals_per_second",
			Help: "Arrivals per second Holt's smoothing forecasts for the pool one pod start time ahead (scaling on).",
		}, []string{"pool"}),
	}
	if reg != nil {
		if err := reg.Register(sc.desired); err != nil {
			return nil, err
		}
		if err := reg.Register(sc.forecast); err != nil {
			return nil, err
		}
	}
	return sc, nil
}

// Tally is the per-model counts the decision core keeps for the scaler's
// model pools (decide.Options.Pools; read by GatherPools); nil for a nil
// Scaler.
func (sc *Scaler) Tally() *Tally {
	if sc == nil {
		return nil
	}
	return &sc.tally
}

// interval is how often Run samples.
func (sc *Scaler) interval() time.Duration { return sc.s.Interval }

// Run samples read every Interval until ctx ends, then returns ctx's error.
func (sc *Scaler) Run(ctx context.Context, read func() map[string]Counts) error {
	t := time.NewTicker(sc.s.Interval)
	defer t.Stop()
	sc.Observe(read())
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			sc.Observe(read())
		}
	}
}

// Observe samples every pool's counts now (Settings.Now).
func (sc *Scaler) Observe(counts map[string]Counts) { sc.observeAt(sc.s.Now(), counts) }

// observeAt samples every pool's counts at now: a pool's first sample holds
// its current count (NoData); each later one turns the counters' growth
// since the previous sample into rates for the pool's Estimator. A pool no
// longer in counts is forgotten, and its series deleted.
func (sc *Scaler) observeAt(now time.Time, counts map[string]Counts) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for name, c := range counts {
		p, ok := sc.pools[name]
		if !ok {
			est, _ := NewEstimator(sc.s) // sc.s is valid: New checked it
			p = &pool{est: est}
			sc.pools[name] = p
		}
		if ok && now.After(p.prevAt) {
			p.last = p.est.ObserveAt(now, rates(p.prev, c, now.Sub(p.prevAt)))
		} else if !ok {
			p.last = p.est.hold(now, c.pods)
		}
		p.prev, p.prevAt = c, now
		sc.desired.WithLabelValues(name).Set(float64(p.last.Desired))
		sc.forecast.WithLabelValues(name).Set(p.last.Forecast)
	}
	for name := range sc.pools {
		if _, ok := counts[name]; !ok {
			delete(sc.pools, name)
			sc.desired.DeleteLabelValues(name)
			sc.forecast.DeleteLabelValues(name)
		}
	}
}

// Snapshot returns every pool's latest estimate, sorted by pool.
func (sc *Scaler) Snapshot() []Pool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	out := make([]Pool, 0, len(sc.pools))
	for name, p := range sc.pools {
		out = append(out, Pool{Pool: name, Estimate: p.last})
	}
	slices.SortFunc(out, func(a, b Pool) int { return strings.Compare(a.Pool, b.Pool) })
	return out
}

// rates is the interval's Input from two samples d apart. A counter that
// went down (a pod removed and added again) counts as no growth.
func rates(prev, cur Counts, d time.Duration) Input {
	secs := d.Seconds()
	per := func(a, b float64) float64 { return max(0, b-a) / secs }
	in := Input{Arrivals: per(prev.arrivals, cur.arrivals), Queue: cur.queue, Cut: cur.cut, Pods: cur.pods}
	for cause, n := range cur.refused {
		if r := per(prev.refused[cause], n); r > 0 {
			if in.Refused == nil {
				in.Refused = map[string]float64{}
			}
			in.Refused[cause] = r
		}
	}
	for pod, n := range cur.served {
		if in.PodRates == nil {
			in.PodRates = map[string]float64{}
		}
		in.PodRates[pod] = per(prev.served[pod], n)
	}
	return in
}
