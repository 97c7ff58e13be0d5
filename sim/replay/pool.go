package replay

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// pod is one simulated vLLM pod of the pool: its own engine (allocator,
// KV cache, OOMs, restarts) and what gatekeeper knows of it.
type pod struct {
	name string
	gpu  string // its GPU's id in the pressure readings
	e    *sim.Engine
	// avail is gatekeeper's view: false from the pod's death (its error
	// breaker opens) until a sampling round sees it back (the health check).
	avail    bool
	wasAlive bool
	// prefix holds the prefix-cache counters of its processes before the
	// current one (an engine's restart zeroes its own, as vLLM's do).
	prefix sim.PrefixCacheStats
	// started counts the attempts that started on it, released those that
	// ended there (gatekeeper_upstream_responses_total).
	started, released int64
}

// upstream is the name of the first pod (a one-pod pool's only one).
const upstream = "vllm-0"

// podName is the upstream name of the pool's i-th pod: vllm-0, vllm-1, …
// (the single pod of a one-pod pool is vllm-0, as before the pool).
func podName(i int) string { return "vllm-" + strconv.Itoa(i) }

// newPods starts the pool's engines (Settings.Pods, PodEngines).
func newPods(s Settings) ([]*pod, error) {
	pods := make([]*pod, max(s.Pods, 1))
	for i := range pods {
		es := s.Engine
		if i < len(s.PodEngines) {
			es = s.PodEngines[i]
		}
		e, err := sim.New(es)
		if err != nil {
			return nil, err
		}
		pods[i] = &pod{name: podName(i), gpu: strconv.Itoa(i), e: e, avail: true, wasAlive: true}
	}
	return pods, nil
}

// pod returns the pod named name; a name not in the pool is a bug.
func (r *runner) pod(name string) *pod {
	for _, p := range r.pods {
		if p.name == name {
			return p
		}
	}
	panic(fmt.Sprintf("replay: no pod %q in the pool", name))
}

// open reports whether some pod may take a request now (gatekeeper's pool:
// a pod is refused while down or critical), and whether some pod is up.
func (r *runner) open() (open, up bool) {
	for _, p := range r.pods {
		up = up || p.avail
		open = open || p.avail && !r.ctl.Critical(p.name)
	}
	return open, up
}

// availability is a pod's state at dispatch, as gatekeeper's pool decides
// it: down while the engine is dead (the error breaker opens, the health
// check agrees), paused while critical.
func (r *runner) availability(name string) queue.Availability {
	switch {
	case !r.pod(name).avail:
		return queue.Down
	case r.ctl.Critical(name):
		return queue.Paused
	}
	return queue.Available
}

// direct is the pod a request goes to without gatekeeper's queue (the
// unprotected and qps-only policies): the pods in turn, as a Kubernetes
// Service's round robin sends them, dead or alive.
func (r *runner) direct() *pod {
	p := r.pods[r.rr%len(r.pods)]
	r.rr++
	return p
}

// prefixStats are the pool's prefix-cache counters over the whole run:
// every pod's, every process's.
func (r *runner) prefixStats() sim.PrefixCacheStats {
	var t sim.PrefixCacheStats
	for _, p := range r.all {
		t.Queries += p.prefix.Queries
		t.Hits += p.prefix.Hits
		if p.e.Alive() { // a dead process's counters were added when it died
			c := p.e.PrefixCache()
			t.Queries += c.Queries
			t.Hits += c.Hits
		}
	}
	return t
}

// ooms counts the pool's OOMs.
func (r *runner) ooms() int64 {
	var n int64
	for _, p := range r.all {
		n += p.e.Metrics().OOMs
	}
	return n
}

// checkDeath notes a pod that died in this advance: the rounds that led
// there are kept (for vllm-0: the post-mortem follows the first pod), its
// prefix counters are banked, and, behind gatekeeper, every in-flight
// request just failed with a 500: the error breaker opens (≥ 5 failures)
// and the health check agrees within a probe; the pod is down and the
// waiters that may use no other pod are refused at once. It failed with
// what its window held (before the failures give it back), as gatekeeper's
// breaker reports it; a load-related death caps the window
// (control.Controller.PodFailed).
func (r *runner) checkDeath(p *pod) {
	alive := p.e.Alive()
	if p.wasAlive && !alive {
		if p == r.pods[0] {
			o, _ := p.e.LastOOM()
			r.res.OOMTimelines = append(r.res.OOMTimelines, OOMTimeline{OOM: o, Rounds: r.pm.timeline()})
		}
		c := p.e.PrefixCache()
		p.prefix.Queries += c.Queries
		p.prefix.Hits += c.Hits
	}
	p.wasAlive = alive
	if r.core == nil || alive || !p.avail || !slices.Contains(r.pods, p) {
		return
	}
	p.avail = false
	if !r.s.NoFailureCeiling {
		f := Failure{At: r.now(), Inflight: r.core.InFlight(p.name)}
		r.ctl.PodFailedAt(f.At, p.name, f.Inflight)
		r.failures = append(r.failures, f)
	}
	r.grant(r.core.Dispatch(r.now()))
}

// started counts the attempts started on each pod so far.
func (r *runner) started() []int64 {
	n := make([]int64, len(r.all))
	for i, p := range r.all {
		n[i] = p.started
	}
	return n
}

// finishPool writes the pool's figures into the result.
func (r *runner) finishPool() {
	r.accrue(r.res.Horizon)
	pc := r.prefixStats()
	r.res.Pool = Pool{Pods: len(r.all), Routing: r.s.Routing, TTFTP50: r.ttfts.quantile(0.5), TTFTP99: r.ttfts.quantile(0.99),
		PrefixQueries: pc.Queries, PrefixHits: pc.Hits, Started: r.started(), Scaling: r.s.Autoscale.Mode,
		GPUTime: r.gpuTime, StartPods: max(r.s.Pods, 1), PeakPods: max(r.peak, len(r.pods))}
}
