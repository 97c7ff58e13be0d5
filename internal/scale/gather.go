package scale

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The series Gather reads, all registered by the app already.
const (
	seriesRequests  = "gatekeeper_requests_total"           // arrivals: every request, by its one outcome
	seriesRejected  = "gatekeeper_rejections_total"         // requests gatekeeper answered itself, by reason
	seriesResponses = "gatekeeper_upstream_responses_total" // what each pod served
	seriesQueue     = "gatekeeper_queue_length"             // waiting now
	seriesLevel     = "gatekeeper_pressure_level"           // > 0: the pod's window is cut by pressure
	seriesAvailable = "gatekeeper_upstream_available"       // one series per pod
)

// Gather returns a read func for Scaler.Run: the counts of the pool `all`
// from the metrics g gathers (the app's own registry), so the scaling signal
// adds nothing to the request path. Refusals are the requests answered with
// a refusal (capacityCause; observe mode refuses none). A gather error leaves out what could
// not be read; the counts stay monotonic, so the next sample catches up.
func Gather(g prometheus.Gatherer) func() map[string]Counts {
	return func() map[string]Counts {
		v := gather(g)
		return map[string]Counts{poolAll: v.all()}
	}
}

// GatherPools returns a read func for Scaler.Run: the pool `all`, as
// Gather's, and with routing by model one pool per model that models (the
// pod registry's ModelPods) names, with the pods that serve it. A model's
// arrivals, refusals and queue are t's (the decision core counts them); its
// pods, windows cut and each pod's service rate are read from g's series of
// those pods. A pod that serves several models is in each of their pools
// with its whole service rate (docs/scaling.md, pools). A model named
// "all" has no pool of its own: the name is every pod's.
func GatherPools(g prometheus.Gatherer, t *Tally, models func() map[string][]string) func() map[string]Counts {
	return func() map[string]Counts {
		v := gather(g)
		out := map[string]Counts{poolAll: v.all()}
		pools := models()
		t.keep(pools)
		for model, names := range pools {
			if model != poolAll {
				out[model] = v.pool(t.counts(model), names)
			}
		}
		return out
	}
}

// view is one gather of the app's series: the pool `all`'s counters and
// queue, and what each pod did.
type view struct {
	arrivals float64
	refused  map[string]float64
	queue    int
	served   map[string]float64 // requests each pod released
	cut      map[string]bool    // pods whose window pressure cuts
	known    map[string]bool    // the pods gatekeeper knows
}

// gather reads g's series into a view.
func gather(g prometheus.Gatherer) *view {
	mfs, _ := g.Gather()
	v := &view{refused: map[string]float64{}, served: map[string]float64{}, cut: map[string]bool{}, known: map[string]bool{}}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v.add(mf.GetName(), m)
		}
	}
	return v
}

// add adds one gathered sample to v.
func (v *view) add(name string, m *dto.Metric) {
	switch name {
	case seriesRequests:
		v.arrivals += m.GetCounter().GetValue()
	case seriesRejected:
		if r := label(m, "reason"); capacityCause(r) {
			v.refused[r] += m.GetCounter().GetValue()
		}
	case seriesResponses:
		v.served[label(m, "upstream")] += m.GetCounter().GetValue()
	case seriesQueue:
		v.queue = int(m.GetGauge().GetValue())
	case seriesLevel:
		if m.GetGauge().GetValue() > 0 {
			v.cut[label(m, "upstream")] = true
		}
	case seriesAvailable:
		v.known[label(m, "upstream")] = true
	}
}

// all is the pool of every pod.
func (v *view) all() Counts {
	return Counts{arrivals: v.arrivals, refused: v.refused, served: v.served, queue: v.queue, cut: len(v.cut), pods: len(v.known)}
}

// pool completes c, a model's counts, with the pods of names gatekeeper
// knows: how many, how many cut, what each served.
func (v *view) pool(c Counts, names []string) Counts {
	c.served = make(map[string]float64, len(names))
	for _, n := range names {
		if !v.known[n] {
			continue
		}
		c.pods++
		if v.cut[n] {
			c.cut++
		}
		c.served[n] = v.served[n]
	}
	return c
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
