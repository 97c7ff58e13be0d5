package main

import (
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim/traffic"
)

// sample is what one measured cell (a target at a scenario) collected over
// every round: exact latencies, not a digest, so p99.9 is a real order
// statistic.
type sample struct {
	lat   []time.Duration // successful (2xx) requests only
	codes map[int]int     // status code (0: transport error) → count
	sent  int
	dur   time.Duration // summed attack time
}

func newSample() *sample { return &sample{codes: map[int]int{}} }

func (s *sample) ok() int { return len(s.lat) }

// q returns the q-quantile (0..1) of the successful latencies by nearest
// rank, 0 if none.
func (s *sample) q(q float64) time.Duration { return traffic.Quantile(s.lat, q) }

// rate is the successful requests per second.
func (s *sample) rate() float64 {
	if s.dur <= 0 {
		return 0
	}
	return float64(s.ok()) / s.dur.Seconds()
}

// okShare is the share of sent requests that succeeded, in percent.
func (s *sample) okShare() float64 {
	if s.sent == 0 {
		return 0
	}
	return 100 * float64(s.ok()) / float64(s.sent)
}
