package pressure

import (
	"maps"
	"math"
	"time"
)

// rate turns successive samples into a smoothed per-second slope: an
// exponentially weighted moving average with time constant tau, so a
// reading dt after the previous one weighs 1 − e^(−dt/tau). The first slope
// is taken as is. For a counter, a drop is a reset: the counter restarted
// from zero, so the increase is the new value (as Prometheus' rate()).
type rate struct {
	prev   float64
	prevAt time.Time
	avg    float64
	hasAvg bool
}

// add feeds one sample and returns the smoothed slope, false until two
// samples are in.
func (r *rate) add(v float64, at time.Time, counter bool, tau time.Duration) (float64, bool) {
	if r.prevAt.IsZero() {
		r.prev, r.prevAt = v, at
		return 0, false
	}
	dt := at.Sub(r.prevAt).Seconds()
	if dt <= 0 {
		return r.avg, r.hasAvg
	}
	delta := v - r.prev
	if counter && delta < 0 {
		delta = v
	}
	slope := delta / dt
	if r.hasAvg {
		r.avg += (1 - math.Exp(-dt/tau.Seconds())) * (slope - r.avg)
	} else {
		r.avg, r.hasAvg = slope, true
	}
	r.prev, r.prevAt = v, at
	return r.avg, true
}

// rateKey names one derived series of a source.
type rateKey struct {
	onGPU  bool
	gpu    string
	signal Signal // the derived signal
}

// deriver computes a source's derived signals from its successive
// readings: rates of Counters and FragmentationGrowth from Fragmentation.
// It belongs to the source's polling goroutine; not safe for concurrent use.
type deriver struct {
	tau   time.Duration
	rates map[rateKey]*rate
}

func newDeriver(tau time.Duration) *deriver {
	return &deriver{tau: tau, rates: map[rateKey]*rate{}}
}

// derive returns a copy of rd taken at at, with derived signals in Values
// and no Counters. Series missing from rd are forgotten: when they return,
// they start over.
func (d *deriver) derive(rd Reading, at time.Time) Reading {
	seen := map[rateKey]bool{}
	step := func(k rateKey, v float64, counter bool, out map[Signal]float64) {
		seen[k] = true
		r := d.rates[k]
		if r == nil {
			r = &rate{}
			d.rates[k] = r
		}
		if x, ok := r.add(v, at, counter, d.tau); ok {
			out[k.signal] = x
		}
	}
	out := Reading{Values: cloneValues(rd.Values)}
	for sig, v := range rd.Counters {
		step(rateKey{signal: sig}, v, true, out.Values)
	}
	if len(rd.GPUs) > 0 {
		out.GPUs = make([]GPUReading, len(rd.GPUs))
	}
	for i, g := range rd.GPUs {
		g.Values = cloneValues(g.Values)
		for sig, v := range g.Counters {
			step(rateKey{onGPU: true, gpu: g.ID, signal: sig}, v, true, g.Values)
		}
		if f, ok := g.Values[Fragmentation]; ok {
			step(rateKey{onGPU: true, gpu: g.ID, signal: FragmentationGrowth}, f, false, g.Values)
		}
		g.Counters = nil
		out.GPUs[i] = g
	}
	maps.DeleteFunc(d.rates, func(k rateKey, _ *rate) bool { return !seen[k] })
	return out
}

func cloneValues(m map[Signal]float64) map[Signal]float64 {
	out := make(map[Signal]float64, len(m)+2)
	maps.Copy(out, m)
	return out
}
