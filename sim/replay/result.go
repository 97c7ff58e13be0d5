package replay

import "time"

// Outcomes counts requests by outcome, as gatekeeper records them (DESIGN §2).
type Outcomes struct {
	Served, UpstreamError, RateLimited, Overloaded, QueueFull, QueueTimeout int64
	// Unfinished were still in flight or queued when the trace ended.
	Unfinished int64
}

// Result is what one run measured.
type Result struct {
	Policy   Policy
	Horizon  time.Duration
	Arrivals int64
	Outcomes Outcomes
	// OOMs is how many times the engine died; Downtime how long it was gone.
	OOMs     int64
	Downtime time.Duration
	// GeneratedTokens counts the output tokens of served requests.
	GeneratedTokens int64
	// Classes holds the latency percentiles per trace class.
	Classes []ClassLatency
	// EffectiveUtilization is the mean over samples of the memory that does
	// work ÷ the memory the process holds (0 while the engine is down).
	EffectiveUtilization float64
	// LevelTime is the virtual time spent at each pressure level (Gatekeeper).
	LevelTime [3]time.Duration
	// MeanWindow is the time-averaged batch window (Gatekeeper).
	MeanWindow float64
	// Series is the time series recorded every Settings.SeriesEvery.
	Series []Sample
	// Wall is the real time the run took.
	Wall time.Duration
}

// Goodput is generated tokens of served requests per virtual second.
func (r Result) Goodput() float64 { return float64(r.GeneratedTokens) / r.Horizon.Seconds() }

// ClassLatency is the end-to-end latency (arrival to last token, queueing
// included) of one class's served requests.
type ClassLatency struct {
	Name     string
	P50, P99 time.Duration
	// RecoveryP99 is the p99 of the requests that arrived while gatekeeper's
	// window was degraded or recovering (Gatekeeper; 0 when none was served),
	// RecoveryServed how many of them were served.
	RecoveryP99    time.Duration
	RecoveryServed int64
}
