package replay

import "time"

// Outcomes counts requests by outcome, as gatekeeper records them (DESIGN §2).
type Outcomes struct {
	Served, UpstreamError, RateLimited, Overloaded, QueueFull, QueueTimeout int64
	// Deadline counts the waiters refused because they could not start
	// before their time-to-first-token deadline (503 deadline): at arrival,
	// by the queue's prediction, or when it passed.
	Deadline int64
	// Shed counts the Overloaded arrivals refused because the pod was
	// critical (the rest: the pod down, or a request that cannot fit).
	Shed int64
	// ClientClosed counts the attempts their clients closed: a user who
	// gave up, or the SDK's timeout (DESIGN §2's client_closed).
	ClientClosed int64
	// Unfinished were still in flight or queued when the trace ended.
	Unfinished int64
}

// RequestOutcomes counts the trace's requests as their users saw them, each
// once, whatever number of attempts its client sent: answered within the
// SLO (Met) or late, given up by the user, or ended by a refusal or a
// failure after the client's last retry. They add up to Result.Arrivals.
type RequestOutcomes struct {
	Met, Late, Abandoned, Refused, Failed, Unfinished int64
}

func (o RequestOutcomes) ended() int64 { return o.Met + o.Late + o.Abandoned + o.Refused + o.Failed }

// Result is what one run measured.
type Result struct {
	Policy Policy
	// Scenario is Settings.Scenario.
	Scenario string
	Horizon  time.Duration
	// Seed is the trace's seed (TraceSettings.Seed).
	Seed uint64
	// Arrivals counts the trace's requests; Attempts what the clients sent
	// for them, retries included. Outcomes counts attempts (what
	// gatekeeper and the pod saw), Requests the requests (what users saw).
	Arrivals, Attempts int64
	Outcomes           Outcomes
	Requests           RequestOutcomes
	// OOMs is how many times the engine died; Downtime how long it was gone
	// (in a pool: every pod's, summed).
	OOMs     int64
	Downtime time.Duration
	// GeneratedTokens counts the output tokens of served requests.
	GeneratedTokens int64
	// SLOTokens counts the output tokens of served requests that met their
	// deadlines (Settings.SLO).
	SLOTokens int64
	// SLOMet counts the served requests that met their deadlines.
	SLOMet int64
	// GPUMemoryUtilization is the engine's gpu_memory_utilization.
	GPUMemoryUtilization float64
	// Classes holds the latency percentiles per trace class.
	Classes []ClassLatency
	// EffectiveUtilization is the mean over samples of the memory that does
	// work ÷ the memory the process holds (0 while the engine is down).
	EffectiveUtilization float64
	// LevelTime is the virtual time spent at each pressure level (Gatekeeper;
	// in a pool, the most pressed pod's).
	LevelTime [3]time.Duration
	// MeanWindow is the time-averaged batch window (Gatekeeper; in a pool,
	// the pods' windows summed).
	MeanWindow float64
	// Series is the time series recorded every Settings.SeriesEvery.
	Series []Sample
	// OOMTimelines holds, for each OOM, the failed step and the 20 s of
	// rounds before it (WriteTimelines).
	OOMTimelines []OOMTimeline
	// Tenants holds what each tenant of the trace got (Arrival.Tenant; one
	// entry, "", for a trace without tenants), in order of first arrival.
	Tenants []TenantResult
	// Fairness is how evenly the queue served the tenants while they were
	// backlogged (Gatekeeper; zero with fewer than two tenants).
	Fairness Fairness
	// Wall is the real time the run took.
	Wall time.Duration
	// Pool is what the pool's figures say (every run; one pod's for a run
	// of one).
	Pool Pool
}

// Pool is a run's pool and routing, and what they did.
type Pool struct {
	Pods    int
	Routing Routing
	// TTFTP50 and TTFTP99 are the time to first token of every served
	// request, from its user's arrival (queueing and retries included).
	TTFTP50, TTFTP99 time.Duration
	// PrefixQueries and PrefixHits are the pods' prefix-cache counters
	// summed (vllm:prefix_cache_queries and _hits, in tokens), every
	// process of every pod.
	PrefixQueries, PrefixHits int64
	// Started counts the attempts started on each pod, vllm-0 first.
	Started []int64
	// Scaling is what sized the pool (Settings.Autoscale); GPUTime is the
	// pod time it cost: every pod from when it was asked for (its start
	// included) until it stopped, summed; PeakPods the most pods serving at
	// once. A static pool of N pods costs N × the horizon.
	Scaling             Scaling
	GPUTime             time.Duration
	StartPods, PeakPods int
}

// PrefixHitRate is the pool's prefix-cache hits ÷ queries, 0 with none.
func (p Pool) PrefixHitRate() float64 {
	if p.PrefixQueries == 0 {
		return 0
	}
	return float64(p.PrefixHits) / float64(p.PrefixQueries)
}

// Throughput is the served requests per virtual second.
func (r Result) Throughput() float64 { return float64(r.Outcomes.Served) / r.Horizon.Seconds() }

// Goodput is generated tokens of served requests per virtual second.
func (r Result) Goodput() float64 { return float64(r.GeneratedTokens) / r.Horizon.Seconds() }

// SLOGoodput is the tokens of requests that met their deadlines per virtual
// second.
func (r Result) SLOGoodput() float64 { return float64(r.SLOTokens) / r.Horizon.Seconds() }

// SLOAttainment is the share of the trace's requests that were answered
// within both deadlines, from when their users sent them (refused, failed,
// abandoned and late requests all count against it, whatever the retries).
func (r Result) SLOAttainment() float64 {
	if r.Arrivals == 0 {
		return 0
	}
	return float64(r.SLOMet) / float64(r.Arrivals)
}

// Record is one run as a JSON object (vllm-sim replay -json), the figures
// the tables lead with first. The request counts (met … unfinished) are the
// trace's requests as their users saw them and add up to arrivals;
// attempts counts what their clients sent, retries included, and
// refused_fraction is the share of attempts refused (429 or 503).
type Record struct {
	Scenario             string  `json:"scenario"`
	HorizonHours         float64 `json:"horizon_hours"`
	Seed                 uint64  `json:"seed"`
	Policy               string  `json:"policy"`
	GPUMemoryUtilization float64 `json:"gpu_memory_utilization"`
	SLOAttainment        float64 `json:"slo_attainment"`
	OOMEvents            int64   `json:"oom_events"`
	DowntimeS            float64 `json:"downtime_s"`
	SLOGoodputTokensPerS float64 `json:"slo_goodput_tokens_per_s"`
	GoodputTokensPerS    float64 `json:"goodput_tokens_per_s"`
	Arrivals             int64   `json:"arrivals"`
	Met                  int64   `json:"met"`
	Late                 int64   `json:"late"`
	Abandoned            int64   `json:"abandoned"`
	Refused              int64   `json:"refused"`
	Failed               int64   `json:"failed"`
	Unfinished           int64   `json:"unfinished"`
	Attempts             int64   `json:"attempts"`
	Served               int64   `json:"served"`
	RefusedFraction      float64 `json:"refused_fraction"`
	P99ShortS            float64 `json:"p99_short_s"`
	P99LongS             float64 `json:"p99_long_s"`
	TimeDegradedFraction float64 `json:"time_degraded_fraction"`
	TimeCriticalFraction float64 `json:"time_critical_fraction"`
	MeanWindow           float64 `json:"mean_window"`
}

// Record returns r as the -json object. p99_short_s and p99_long_s are the
// p99 of the classes so named (0 when the trace has none).
func (r Result) Record() Record {
	q := r.Requests
	rec := Record{
		Scenario: r.Scenario, HorizonHours: r.Horizon.Hours(), Seed: r.Seed, Policy: r.Policy.String(),
		GPUMemoryUtilization: r.GPUMemoryUtilization, SLOAttainment: r.SLOAttainment(),
		OOMEvents: r.OOMs, DowntimeS: r.Downtime.Seconds(), SLOGoodputTokensPerS: r.SLOGoodput(), GoodputTokensPerS: r.Goodput(),
		Arrivals: r.Arrivals, Met: q.Met, Late: q.Late, Abandoned: q.Abandoned, Refused: q.Refused, Failed: q.Failed,
		Unfinished: q.Unfinished, Attempts: r.Attempts, Served: r.Outcomes.Served, RefusedFraction: r.refused(),
		TimeDegradedFraction: r.LevelTime[1].Seconds() / r.Horizon.Seconds(),
		TimeCriticalFraction: r.LevelTime[2].Seconds() / r.Horizon.Seconds(),
		MeanWindow:           r.MeanWindow,
	}
	for _, c := range r.Classes {
		switch c.Name {
		case "short":
			rec.P99ShortS = c.P99.Seconds()
		case "long":
			rec.P99LongS = c.P99.Seconds()
		}
	}
	return rec
}

// ClassLatency is the end-to-end latency (arrival to last token, queueing
// included) of one class's served requests, and how many of its requests
// met the SLO.
type ClassLatency struct {
	Name     string
	P50, P99 time.Duration
	// RecoveryP99 is the p99 of the requests that arrived while gatekeeper's
	// window was degraded or recovering (Gatekeeper; 0 when none was served),
	// RecoveryServed how many of them were served.
	RecoveryP99    time.Duration
	RecoveryServed int64
	// Arrivals counts the class's requests and Met those answered within
	// the SLO (the class's share of SLO attainment).
	Arrivals, Met int64
}
