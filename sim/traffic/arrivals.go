package traffic

import (
	"math"
	"math/rand/v2"
	"time"
)

// Pattern is an arrival rate that alternates from time 0: BaseQPS for Steady,
// then BurstQPS for Burst, repeating (the burst closes each period of
// Steady + Burst). The zero Burst means BaseQPS throughout.
type Pattern struct {
	// BaseQPS and BurstQPS are arrivals per second; ≥ 0.
	BaseQPS, BurstQPS float64
	// Steady and Burst are the phase lengths; ≥ 0.
	Steady, Burst time.Duration
}

// Rate is the arrival rate at t (since the start), per second.
func (p Pattern) Rate(t time.Duration) float64 {
	if period := p.Steady + p.Burst; period > 0 && t%period >= p.Steady {
		return p.BurstQPS
	}
	return p.BaseQPS
}

// Peak is the higher of the two rates.
func (p Pattern) Peak() float64 { return max(p.BaseQPS, p.BurstQPS) }

// Gap draws the time to the next arrival of a Poisson process at rate per
// second (exponential), taking one ExpFloat64 from rng. A rate ≤ 0, or a gap
// too long for a Duration, returns the longest Duration.
func Gap(rng *rand.Rand, rate float64) time.Duration {
	if rate <= 0 {
		return math.MaxInt64
	}
	g := rng.ExpFloat64() / rate * float64(time.Second)
	if g >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(g)
}

// Arrivals yields the arrival times of an open-loop Poisson process whose
// rate follows a Pattern. It thins: candidates come at the pattern's peak
// rate and each is kept with probability Rate(t) ÷ peak, so a rate change
// needs no redraw. Create one with NewArrivals. Not safe for concurrent use.
type Arrivals struct {
	p    Pattern
	rng  *rand.Rand
	peak float64
	t    time.Duration
}

// NewArrivals returns the arrivals of p drawn from rng. rng may be shared
// with other draws (the request mix): each Next takes two draws per
// candidate, an ExpFloat64 and a Float64, and nothing else.
func NewArrivals(p Pattern, rng *rand.Rand) *Arrivals {
	return &Arrivals{p: p, rng: rng, peak: p.Peak()}
}

// Next returns the time of the next arrival since the start, never before
// the last one. With no positive rate it returns the longest Duration.
func (a *Arrivals) Next() time.Duration {
	for {
		g := Gap(a.rng, a.peak)
		if g > math.MaxInt64-a.t {
			a.t = math.MaxInt64
			return a.t
		}
		a.t += g
		if a.rng.Float64()*a.peak <= a.p.Rate(a.t) {
			return a.t
		}
	}
}
