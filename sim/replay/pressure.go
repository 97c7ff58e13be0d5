package replay

import (
	"time"

	"github.com/gatekeeper-dev/gatekeeper/breaker"
	"github.com/gatekeeper-dev/gatekeeper/queue"
)

// sample reads the engine as gatekeeper's sources would and feeds the slow
// breaker; it also samples effective utilization for every policy.
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
	readings := r.readings(alive)
	up := r.slow.ObserveAt(r.now(), readings, r.core.Len() == 0)
	if int(up.Level) < len(r.res.LevelTime) {
		r.res.LevelTime[up.Level] += r.s.Interval
	}
	r.winSum += float64(up.Limit)
	if up.LimitChanged {
		r.core.SetWindow(upstream, up.Limit)
	}
	r.phase = up.Phase
	if up.PhaseChanged {
		order := queue.FIFO
		if up.Phase == breaker.PhaseDegraded || up.Phase == breaker.PhaseRecovering {
			order = queue.ShortestFirst
		}
		r.core.SetOrder(order)
	}
	if up.LevelChanged && up.Transition.To > up.Transition.From && r.s.EmptyCacheOnDegraded {
		r.e.EmptyCache()
	}
	if alive && !r.avail {
		r.avail = true // the health check sees the pod back
		r.core.SetAvailable(upstream, true)
	}
	r.grant(r.core.Dispatch(r.now()))
}

// readings are the signals of DESIGN §3 from the engine's memory_blocks and
// /metrics; while the pod is down every source fails and readings go stale.
func (r *runner) readings(alive bool) []breaker.Reading {
	if !alive {
		for i := range r.last {
			r.last[i].Stale = true
		}
		return r.last
	}
	mb := r.e.MemoryBlocks("0")
	frag := 1.0
	if mb.LargestFreeBlockBytes > 0 {
		frag = float64(mb.FreeBytes) / float64(mb.LargestFreeBlockBytes)
	}
	m := r.e.Metrics()
	r.last = append(r.last[:0],
		breaker.Reading{Signal: "fragmentation", Value: frag},
		breaker.Reading{Signal: "kv_cache_usage", Value: m.KVCacheUsage},
		breaker.Reading{Signal: "memory_used", Value: float64(m.Device.UsedBytes) / float64(m.Device.TotalBytes)},
		breaker.Reading{Signal: "waiting", Value: float64(m.Waiting)},
		breaker.Reading{Signal: "preemption_rate", Value: rate(m.Counters.Preemptions, &r.preempt, r.s.Interval)},
		breaker.Reading{Signal: "alloc_retry_rate", Value: rate(m.Allocator.NumAllocRetries, &r.retries, r.s.Interval)})
	return r.last
}

// rate is a counter's increase per second since *last, which it updates. A
// counter below *last was reset by a restart and counts from zero, as
// Prometheus' rate() treats a reset.
func rate(cur int64, last *int64, every time.Duration) float64 {
	d := cur - *last
	if d < 0 {
		d = cur
	}
	*last = cur
	return float64(d) / every.Seconds()
}

// effective is the memory doing work ÷ the memory the process holds: live
// allocations, counting of the KV cache only the blocks in use.
func (r *runner) effective() float64 {
	m := r.e.Metrics()
	p := r.e.Plan()
	used := float64(m.Allocator.AllocatedBytes) - float64(p.KVCacheBytes)*(1-m.KVCacheUsage)
	return used / float64(m.Allocator.ReservedBytes)
}
