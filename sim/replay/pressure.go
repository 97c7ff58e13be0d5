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
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// errPodDown is what the replay's sources answer while the engine is dead:
// every read fails, as a real pod's would, and its readings go stale.
var errPodDown = errors.New("replay: pod down")

// blocksSource reads the engine's allocator endpoint as gatekeeper does: the
// figures the simulated pod serves, through pressure's own reading of them
// (MemoryBlockReading is ParseMemoryBlocks without the JSON, which cost a
// sixth of a run).
type blocksSource struct{ e *sim.Engine }

func (blocksSource) Name() string { return upstream + "/memory_blocks" }

func (b blocksSource) Read(context.Context) (pressure.Reading, error) {
	if !b.e.Alive() {
		return pressure.Reading{}, errPodDown
	}
	mb := b.e.MemoryBlocks("0")
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
type vllmSource struct{ e *sim.Engine }

func (vllmSource) Name() string { return upstream + "/vllm" }

func (v vllmSource) Read(context.Context) (pressure.Reading, error) {
	if !v.e.Alive() {
		return pressure.Reading{}, errPodDown
	}
	m := v.e.Metrics()
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
	e    *sim.Engine
	kind pressure.Kind // nvml or dcgm: the same figures
}

func (d deviceSource) Name() string { return string(d.kind) }

func (d deviceSource) Read(context.Context) (pressure.Reading, error) {
	m := d.e.Metrics().Device
	return pressure.Reading{GPUs: []pressure.GPUReading{{ID: "0",
		Values: map[pressure.Signal]float64{pressure.MemoryUsed: float64(m.UsedBytes) / float64(m.TotalBytes)}}}}, nil
}

// newMonitor builds the pressure monitor over the engine's sources that the
// policy lists (Settings.Sources): the pod's /metrics and allocator endpoint
// under its upstream, device memory (NVML or DCGM) on the node.
func (r *runner) newMonitor() (*pressure.Monitor, error) {
	ps := pressure.Settings{Interval: r.s.Interval, StaleAfter: r.s.StaleAfter, Now: r.now}
	up := pressure.UpstreamSettings{Name: upstream, GPUs: []string{"0"}}
	for _, k := range r.s.Sources {
		switch k {
		case pressure.KindVLLM:
			up.Sources = append(up.Sources, pressure.SourceSettings{Kind: k, Source: vllmSource{r.e}})
		case pressure.KindMemoryBlocks:
			up.Sources = append(up.Sources, pressure.SourceSettings{Kind: k, Source: blocksSource{r.e}})
		case pressure.KindNVML, pressure.KindDCGM:
			ps.Sources = append(ps.Sources, pressure.SourceSettings{Kind: k, Source: deviceSource{r.e, k}})
		default:
			return nil, fmt.Errorf("replay: Sources: unknown kind %q", k)
		}
	}
	ps.Upstreams = []pressure.UpstreamSettings{up}
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

// availability is the pod's state at dispatch, as gatekeeper's pool decides
// it: down while the engine is dead (the error breaker opens, the health
// check agrees), paused while critical.
func (r *runner) availability(string) queue.Availability {
	switch {
	case !r.avail:
		return queue.Down
	case r.ctl.Critical(upstream):
		return queue.Paused
	}
	return queue.Available
}

// sample polls the pod as gatekeeper's monitor would and applies the
// controller's decisions; it also samples effective utilization for every
// policy.
func (r *runner) sample() {
	alive := r.e.Alive()
	if !alive {
		r.dead += r.s.Interval
	}
	r.samples++
	if alive {
		r.utilSum += r.effective()
	}
	if r.core == nil {
		return
	}
	up := r.round()
	if int(up.Level) < len(r.res.LevelTime) {
		r.res.LevelTime[up.Level] += r.s.Interval
	}
	r.winSum += float64(up.Limit)
	if alive && !r.avail {
		r.avail = true // the health check sees the pod back
	}
	r.grant(r.core.Dispatch(r.now()))
}

// round is one pressure round: the sources read, the controller's decision
// applied to the queue as gatekeeper applies it, the relief hook fired.
// gatekeeper's monitor polls every source at once when it starts, so the
// replay runs a round at time 0 too (newRunner), before the first arrival.
func (r *runner) round() control.Change {
	st := r.mon.PollAt(context.Background(), r.now())
	empty := r.core.Len() == 0
	d := r.ctl.ObserveAt(r.now(), st, empty)
	if r.s.Observer != nil {
		r.s.Observer(Round{Failures: r.failures, State: st, BacklogEmpty: empty, Decision: d})
	}
	r.failures = nil
	up := d.Upstreams[0]
	d.Apply(r.core, true) // as gatekeeper applies it
	r.phase = up.Phase
	if (up.Hook == control.Degraded || up.Hook == control.Critical) && up.Transition.To > up.Transition.From &&
		r.s.EmptyCacheOnDegraded {
		r.e.EmptyCache()
	}
	return up
}

// controllerFor is the replay's one upstream under the product's controller.
func controllerFor(ss breaker.SlowSettings, m control.Memory, maxTokens int64) control.Settings {
	return control.Settings{Upstreams: []control.Upstream{{Name: upstream, Slow: ss, Memory: m, MaxInflightTokens: maxTokens}}}
}

// effective is the memory doing work ÷ the memory the process holds: live
// allocations, counting of the KV cache only the blocks in use.
func (r *runner) effective() float64 {
	m := r.e.Metrics()
	p := r.e.Plan()
	used := float64(m.Allocator.AllocatedBytes) - float64(p.KVCacheBytes)*(1-m.KVCacheUsage)
	return used / float64(m.Allocator.ReservedBytes)
}
