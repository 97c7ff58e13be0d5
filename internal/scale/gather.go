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

// capacityCause reports whether a refusal reason is demand the pool could
// not serve; the others (a bad request, a client's rate limit or quota, the
// drain) would not be served by more pods either.
func capacityCause(reason string) bool {
	switch reason {
	case "queue_full", "queue_timeout", "deadline", "overloaded", "no_memory", "shed_priority", "no_upstream", "upstream_overloaded":
		return true
	}
	return false
}

// Gather returns a read func for Scaler.Run: the counts of PoolAll from the
// metrics g gathers (the app's own registry), so the scaling signal adds
// nothing to the request path. Refusals are the requests answered with
// a refusal (capacityCause; observe mode refuses none). A gather error leaves out what could
// not be read; the counts stay monotonic, so the next sample catches up.
func Gather(g prometheus.Gatherer) func() map[string]Counts {
	return func() map[string]Counts {
		mfs, _ := g.Gather()
		c := Counts{refused: map[string]float64{}, served: map[string]float64{}}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				addMetric(&c, mf.GetName(), m)
			}
		}
		return map[string]Counts{poolAll: c}
	}
}

// addMetric adds one gathered sample to c.
func addMetric(c *Counts, name string, m *dto.Metric) {
	switch name {
	case seriesRequests:
		c.arrivals += m.GetCounter().GetValue()
	case seriesRejected:
		if r := label(m, "reason"); capacityCause(r) {
			c.refused[r] += m.GetCounter().GetValue()
		}
	case seriesResponses:
		c.served[label(m, "upstream")] += m.GetCounter().GetValue()
	case seriesQueue:
		c.queue = int(m.GetGauge().GetValue())
	case seriesLevel:
		if m.GetGauge().GetValue() > 0 {
			c.cut++
		}
	case seriesAvailable:
		c.pods++
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
