package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// errPodDown is what the replay's sources answer while the engine is dead:
// every read fails, as a real pod's would, and its readings go stale.
var errPodDown = errors.New("replay: pod down")

// blocksSource reads the engine's allocator endpoint as gatekeeper does: the
// figures the simulated pod serves, through pressure's own reading of them
// (MemoryBlockReading is ParseMemoryBlocks without the JSON, which cost a
// sixth of a run).
type blocksSource struct{ p *pod }

func (b blocksSource) Name() string { return b.p.name + "/memory_blocks" }

func (b blocksSource) Read(context.Context) (pressure.Reading, error) {
	if !b.p.e.Alive() {
		return pressure.Reading{}, errPodDown
	}
	mb := b.p.e.MemoryBlocks(b.p.gpu)
	return pressure.Reading{GPUs: []pressure.GPUReading{pressure.MemoryBlockReading(pressure.MemoryBlock{
		ID: mb.GPUID, TotalBytes: float64(mb.TotalBytes), UsedBytes: float64(mb.UsedBytes),
		FreeBytes: float64(mb.FreeBytes), LargestFreeBlockBytes: float64(mb.LargestFreeBlockBytes),
		ReservedBytes: float64(mb.ReservedBytes), AllocatedBytes: float64(mb.AllocatedBytes),
		FragmentationRatio: mb.FragmentationRatio, AllocRetryCount: float64(mb.AllocRetryCount),
	})}}, nil
}

// vllmSource reads what the engine's /metrics carries, as pressure's vllm
// source turns it into a Reading (values and the preemption counter). The
// text format is skipped: parsing it every sample would dominate the run.
type vllmSource struct{ p *pod }

func (v vllmSource) Name() string { return v.p.name + "/vllm" }

func (v vllmSource) Read(context.Context) (pressure.Reading, error) {
	if !v.p.e.Alive() {
		return pressure.Reading{}, errPodDown
	}
	m := v.p.e.Metrics()
	return pressure.Reading{
		Values: map[pressure.Signal]float64{pressure.KVCacheUsage: m.KVCacheUsage,
			pressure.Running: float64(m.Running), pressure.Waiting: float64(m.Waiting)},
		Counters: map[pressure.Signal]float64{pressure.PreemptionRate: float64(m.Counters.Preemptions)},
	}, nil
}

// deviceSource reads the GPU as NVML does: device memory used ÷ total, the
// caching allocator's cache counted as used. It answers while the pod is
// down too (the driver is there; the process is not).
type deviceSource struct {
	p    *pod
	kind pressure.Kind // nvml or dcgm: the same figures
}

// Name is the kind, and for a pool's later pods the GPU's id after it.
func (d deviceSource) Name() string {
	if d.p.gpu == "0" {
		return string(d.kind)
	}
	return string(d.kind) + "-" + d.p.gpu
}

func (d deviceSource) Read(context.Context) (pressure.Reading, error) {
	m := d.p.e.Metrics().Device
	return pressure.Reading{GPUs: []pressure.GPUReading{{ID: d.p.gpu,
		Values: map[pressure.Signal]float64{pressure.MemoryUsed: float64(m.UsedBytes) / float64(m.TotalBytes)}}}}, nil
}

// newMonitor builds the pressure monitor over the pods' sources that the
// policy lists (Settings.Sources): each pod's /metrics and allocator
// endpoint under its upstream, device memory (NVML or DCGM) on its node
// (each pod its own GPU, "0" for vllm-0, "1" for vllm-1, …).
func (r *runner) newMonitor() (*pressure.Monitor, error) {
	ps := pressure.Settings{Interval: r.s.Interval, StaleAfter: r.s.StaleAfter, Now: r.now}
	for _, p := range r.pods {
		up := pressure.UpstreamSettings{Name: p.name, GPUs: []string{p.gpu}}
		for _, k := range r.s.Sources {
			switch k {
			case pressure.KindVLLM:
				up.Sources = append(up.Sources, pressure.SourceSettings{Kind: k, Source: vllmSource{p}})
			case pressure.KindMemoryBlocks:
				up.Sources = append(up.Sources, pressure.SourceSettings{Kind: k, Source: blocksSource{p}})
			case pressure.KindNVML, pressure.KindDCGM:
				ps.Sources = append(ps.Sources, pressure.SourceSettings{Kind: k, Source: deviceSource{p, k}})
			default:
				return nil, fmt.Errorf("replay: Sources: unknown kind %q", k)
			}
		}
		ps.Upstreams = append(ps.Upstreams, up)
	}
	return pressure.New(ps)
}

// PolicySources returns the kinds of source a policy file reads for its
// first upstream (the replay's one pod): that upstream's sources and the
// node-level ones, each kind once, in the order listed.
func PolicySources(c *config.Config) []pressure.Kind {
	var list []config.Source
	if len(c.Upstreams) > 0 {
		list = append(list, c.Upstreams[0].Sources...)
	}
	list = append(list, c.Pressure.Sources...)
	kinds := []pressure.Kind{}
	for _, src := range list {
		if k := pressure.Kind(src.Kind); !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// sample polls the pods as gatekeeper's monitor would and applies the
// controller's decisions; it also samples effective utilization for every
// policy.
func (r *runner) sample() {
	r.samples++
	for _, p := range r.serving() {
		r.utilN++
		if p.e.Alive() {
			r.utilSum += effective(p.e)
		} else {
			r.dead += r.s.Interval
		}
	}
	if r.core == nil {
		return
	}
	level, limit := r.round()
	if int(level) < len(r.res.LevelTime) {
		r.res.LevelTime[level] += r.s.Interval
	}
	r.winSum += float64(limit)
	for _, p := range r.pods {
		if p.e.Alive() && !p.avail {
			p.avail = true // the health check sees the pod back
			r.podBack(p)
		}
	}
	r.grant(r.core.Dispatch(r.now()))
	r.autoscale()
	r.stopDrained()
}

// round is one pressure round: the sources read, the controller's decision
// applied to the queue as gatekeeper applies it, the relief hooks fired,
// the router told what was read. gatekeeper's monitor polls every source
// at once when it starts, so the replay runs a round at time 0 too
// (newRunner), before the first arrival. It returns the level of the most
// pressed pod and the pool's window (the sum of the pods').
func (r *runner) round() (breaker.Level, int) {
	st := r.mon.PollAt(context.Background(), r.now())
	empty := r.core.Len() == 0
	d := r.ctl.ObserveAt(r.now(), st, empty)
	if r.s.Observer != nil {
		r.s.Observer(Round{Failures: r.failures, State: st, BacklogEmpty: empty, Decision: d, Started: r.started()})
	}
	r.failures = nil
	d.Apply(r.core, true) // as gatekeeper applies it
	r.phase = breaker.PhaseNormal
	level, limit := breaker.Level(0), 0
	for _, up := range d.Upstreams {
		if r.phase == breaker.PhaseNormal {
			r.phase = up.Phase
		}
		level, limit = max(level, up.Level), limit+up.Limit
		if (up.Hook == control.Degraded || up.Hook == control.Critical) && up.Transition.To > up.Transition.From &&
			r.s.EmptyCacheOnDegraded {
			r.pod(up.Name).e.EmptyCache()
		}
	}
	r.observed(st)
	return level, limit
}

// controllerFor is the replay's pods under the product's controller, one
// upstream each with the same settings.
func controllerFor(ss breaker.SlowSettings, m control.Memory, maxTokens int64, pods []*pod) control.Settings {
	var s control.Settings
	for _, p := range pods {
		s.Upstreams = append(s.Upstreams, control.Upstream{Name: p.name, Slow: ss, Memory: m, MaxInflightTokens: maxTokens})
	}
	return s
}

// effective is the memory doing work ÷ the memory the process holds: live
// allocations, counting of the KV cache only the blocks in use.
func effective(e *sim.Engine) float64 {
	m := e.Metrics()
	p := e.Plan()
	used := float64(m.Allocator.AllocatedBytes) - float64(p.KVCacheBytes)*(1-m.KVCacheUsage)
	return used / float64(m.Allocator.ReservedBytes)
}
