package proxy

import (
	"sync"
	"sync/atomic"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/prometheus/client_golang/prometheus"
)

// The series every request records, resolved once: WithLabelValues checks,
// hashes and looks up its label values under the vector's lock on every
// call, six to eight times a request (both fronts). The label values are a
// known, bounded set: the outcomes (decide.Outcomes), the two queue-wait
// sizes, and the pods UpstreamsSet declares, whose series are resolved
// when it declares them and forgotten when it removes them. A pod not
// declared (none is, before the first UpstreamsSet) or an outcome outside
// decide.Outcomes is recorded through WithLabelValues, as before.

// outcomeSeries are one outcome's request counter and duration histogram.
type outcomeSeries struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// upstreamSeries are one pod's series.
type upstreamSeries struct {
	tokens, prompt, completion, usageLost prometheus.Counter
	ttfb                                  prometheus.Observer
	responses                             [len(statusClasses)]prometheus.Counter // by statusClass
}

// seriesCache holds the resolved series. Must not be copied.
type seriesCache struct {
	outcomes    map[decide.Outcome]outcomeSeries // written once, by NewMetrics
	short, long prometheus.Observer              // queue wait by size
	mu          sync.Mutex                       // serialises setUpstreams
	upstreams   atomic.Pointer[map[string]*upstreamSeries]
}

// resolveFixed resolves the series whose label values are known at start.
func (m *Metrics) resolveFixed() {
	c := &m.series
	c.outcomes = make(map[decide.Outcome]outcomeSeries, len(decide.Outcomes))
	for _, o := range decide.Outcomes {
		c.outcomes[o] = m.outcomeSeries(o)
	}
	c.short, c.long = m.queueWait.WithLabelValues("short"), m.queueWait.WithLabelValues("long")
}

// outcomeSeries resolves o's series.
func (m *Metrics) outcomeSeries(o decide.Outcome) outcomeSeries {
	return outcomeSeries{requests: m.requests.WithLabelValues(string(o)), duration: m.duration.WithLabelValues(string(o))}
}

// setUpstreams resolves the series of the pods named, keeps those already
// resolved, and forgets every other pod's: the cache holds the declared
// pods and no more.
func (m *Metrics) setUpstreams(names []string) {
	c := &m.series
	c.mu.Lock()
	defer c.mu.Unlock()
	var cur map[string]*upstreamSeries
	if p := c.upstreams.Load(); p != nil {
		cur = *p
	}
	next := make(map[string]*upstreamSeries, len(names))
	for _, name := range names {
		if s, ok := cur[name]; ok {
			next[name] = s
			continue
		}
		s := &upstreamSeries{tokens: m.tokens.WithLabelValues(name),
			prompt: m.usedTokens.WithLabelValues(name, "prompt"), completion: m.usedTokens.WithLabelValues(name, "completion"),
			usageLost: m.usageLost.WithLabelValues(name), ttfb: m.ttfb.WithLabelValues(name)}
		for i, class := range statusClasses {
			s.responses[i] = m.upstreamRes.WithLabelValues(name, class)
		}
		next[name] = s
	}
	c.upstreams.Store(&next)
}

// upstream is name's resolved series; nil when UpstreamsSet has not
// declared it, or m is nil.
func (m *Metrics) upstream(name string) *upstreamSeries {
	if m == nil {
		return nil
	}
	if p := m.series.upstreams.Load(); p != nil {
		return (*p)[name]
	}
	return nil
}

// statusClass is the index in statusClasses of a response's status: its
// hundreds, or error for a transport error (any status outside 100-599).
func statusClass(status int) int {
	if status >= 100 && status < 600 {
		return status/100 - 1
	}
	return len(statusClasses) - 1
}
