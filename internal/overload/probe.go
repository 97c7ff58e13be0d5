package overload

import (
	"math"
	"runtime/metrics"
	"time"
)

// schedMetric is the Go scheduler's histogram of how long goroutines waited
// runnable before they ran.
const schedMetric = "/sched/latencies:seconds"

// schedProbe reads schedMetric and returns the 90th percentile of what was
// recorded since its last read. It is not safe for concurrent use (the
// Manager reads it under its lock).
type schedProbe struct {
	sample []metrics.Sample
	prev   []uint64 // the counts at the last read
	delta  []uint64
}

// newSchedProbe returns a probe whose first read covers the time since it
// was made, not since the process started.
func newSchedProbe() *schedProbe {
	p := &schedProbe{sample: []metrics.Sample{{Name: schedMetric}}}
	p.read()
	return p
}

// read returns the 90th percentile since the last read and the samples it
// rests on; (0, 0) where the runtime does not have the metric.
func (p *schedProbe) read() (time.Duration, uint64) {
	metrics.Read(p.sample) // reuses the histogram it filled before
	if p.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0, 0
	}
	h := p.sample[0].Value.Float64Histogram()
	if len(p.prev) != len(h.Counts) {
		p.prev, p.delta = make([]uint64, len(h.Counts)), make([]uint64, len(h.Counts))
	}
	for i, c := range h.Counts {
		p.delta[i], p.prev[i] = c-p.prev[i], c
	}
	return quantile(p.delta, h.Buckets, 0.9)
}

// quantile returns the q-quantile of a histogram's counts as the upper
// bound of the bucket it falls in (the lower bound for the last, unbounded
// bucket), and the total count. buckets has one more entry than counts.
func quantile(counts []uint64, buckets []float64, q float64) (time.Duration, uint64) {
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return 0, 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen >= rank {
			b := buckets[i+1]
			if math.IsInf(b, 1) {
				b = buckets[i]
			}
			return time.Duration(b * float64(time.Second)), total
		}
	}
	return time.Duration(buckets[len(buckets)-1] * float64(time.Second)), total
}
