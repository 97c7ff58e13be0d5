package replay

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/breaker"
	"github.com/gatekeeper-dev/gatekeeper/config"
	"github.com/gatekeeper-dev/gatekeeper/control"
	"github.com/gatekeeper-dev/gatekeeper/pressure"
	"github.com/gatekeeper-dev/gatekeeper/proxy/classify"
	"github.com/gatekeeper-dev/gatekeeper/queue"
	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// Policy is what stands in front of the engine.
type Policy int

// The policies of issue 5.
const (
	// None sends every request straight to the engine.
	None Policy = iota
	// QPSOnly puts gatekeeper's fast breaker (global token bucket) in front.
	QPSOnly
	// Gatekeeper runs the fast breaker, the slow breaker (level machine and
	// batch window) and the admission queue, as the proxy does.
	Gatekeeper
)

// String returns the policy's name as the table and -policies spell it.
func (p Policy) String() string {
	switch p {
	case None:
		return "unprotected"
	case QPSOnly:
		return "qps-only"
	case Gatekeeper:
		return "gatekeeper"
	}
	return "unknown"
}

const upstream = "vllm-0"

// Settings configures one run. The zero value runs the default trace with
// no protection on the replay's default engine.
type Settings struct {
	// Engine is the simulated pod. Its zero fields take sim's defaults.
	Engine sim.Settings
	// Trace is the synthetic traffic, used when Source is nil.
	Trace TraceSettings
	// Source, if set, replaces the synthetic trace (e.g. a CSVTrace). The
	// run then lasts Trace.Duration when that is set, else until the source
	// ends. A source serves one run only.
	Source Source
	// Policy is what stands in front of the engine.
	Policy Policy
	// Limiter is the fast breaker (QPSOnly, Gatekeeper). A zero QPS means
	// the policy file's default: 80 QPS, burst 40.
	Limiter breaker.LimiterSettings
	// LimiterOff turns the fast breaker's global limit off (the policy
	// file's qps: 0); Limiter is then unused.
	LimiterOff bool
	// Slow is the slow breaker (Gatekeeper). Zero Rules mean the policy
	// file's defaults as control.SlowSettings maps them (fragmentation
	// 1.2/1.5 held 2s, kv_cache_usage 0.95, alloc_retry_rate 0.01, a pod's
	// own 503s, hysteresis 0.05, hold 5s, the pod's waiting requests as the
	// queue signal); a zero MaxInflight
	// means the engine's max_num_seqs, a zero MinInflight 4.
	Slow breaker.SlowSettings
	// Memory is memory admission (Gatekeeper), the policy's
	// upstreams[].vocab_size and batch.memory_share; the zero value is off.
	Memory control.Memory
	// MaxInflightTokens is the token-budget window (Gatekeeper), the
	// policy's upstreams[].max_inflight_tokens; 0 is off.
	MaxInflightTokens int64
	// BytesPerLogit is the policy's estimate.bytes_per_logit; each arrival's
	// memory is estimated as classify estimates a request (one sequence,
	// plus its prompt_logprobs). 0 means classify's default, 32.
	BytesPerLogit int64
	// PromptLogprobsChunk is the policy's estimate.prompt_logprobs_chunk:
	// the most prompt tokens a prompt_logprobs arrival's estimate counts. 0
	// means classify's default, 8192.
	PromptLogprobsChunk int64
	// Queue bounds the admission queue (Gatekeeper); zero fields take the
	// queue's defaults.
	Queue queue.Settings
	// MaxWait is how long a request may wait in the queue. 0 means 30s.
	MaxWait time.Duration
	// TTFTDeadline is the policy's queue.ttft_deadline (Gatekeeper): a
	// waiter that cannot start within it of its arrival is refused at once
	// (the queue's prediction) or when it passes. 0 means the policy file's
	// default; negative means none (max_wait alone).
	TTFTDeadline time.Duration
	// ClientDeadlines makes every arrival send its own time-to-first-token
	// deadline, its class's SLO TTFT, in the policy's deadline header
	// (queue.deadline_header; x-slo-ttft-ms for llm-d's clients), which
	// tightens TTFTDeadline (Gatekeeper).
	ClientDeadlines bool
	// DeadlineOrder is the policy's queue.order: earliest_deadline
	// (Gatekeeper).
	DeadlineOrder bool
	// NoFailureCeiling is a what-if of gatekeeper before issue 23: the
	// pod's deaths are not reported to the controller, so no window ceiling
	// follows them (Gatekeeper).
	NoFailureCeiling bool
	// Interval is the pressure sampling period (and the utilization
	// sampling period of every policy). 0 means 500ms.
	Interval time.Duration
	// StaleAfter is how long a pressure source may go without a good
	// reading before its values are stale (the policy's stale_after). 0
	// means 4 × Interval, as gatekeeper's.
	StaleAfter time.Duration
	// SeriesEvery, when > 0, records a Sample into Result.Series this often.
	SeriesEvery time.Duration
	// EmptyCacheOnDegraded fires the allocator's empty_cache relief hook
	// each time the level rises to degraded or critical (Gatekeeper).
	EmptyCacheOnDegraded bool
	// SLO is the deadlines behind SLO goodput; the zero value selects the
	// defaults (short 2s, long 10s to the first token; 100ms per token).
	SLO SLO
	// Observer, if set, is called after every pressure round (Gatekeeper),
	// so a test can hold the replay's decisions against gatekeeper's.
	Observer func(Round)
	// Tenants makes the queue share between the trace's tenants
	// (Arrival.Tenant, TenantTrace) by its Virtual Token Counter
	// (Gatekeeper): each request is queued for its tenant, charged its
	// estimated service (prompt + 2 × max_tokens per sequence) when granted
	// and settled with the real one (prompt + 2 × the tokens generated) when
	// it ends. Off, every request is the default tenant's (the queue orders
	// as without tenants); Result.Tenants and Result.Fairness are measured
	// either way.
	Tenants bool
	// TenantPriority, if set, puts each listed tenant's requests at that
	// priority (a traffic class per tenant; others at 0), tenants on or off
	// (Gatekeeper): a what-if beside the fair share.
	TenantPriority map[string]int
	// Sources are the kinds of pressure source the policy reads for the pod
	// (Gatekeeper), its upstream's and the node's: vllm (the pod's
	// /metrics), memory_blocks (the allocator exporter), nvml or dcgm (device
	// memory). A signal no listed source yields is absent, as it is to
	// gatekeeper. Nil means the policy file's default, vllm alone: a plain
	// vLLM serves no allocator endpoint and the default lists no node
	// source. PolicySources maps a policy file's.
	Sources []pressure.Kind
}

// Round is one pressure round: what the controller was given and decided.
type Round struct {
	// Failures are the pod's failures since the previous round, each
	// reported to the controller (Controller.PodFailedAt) when it happened.
	Failures     []Failure
	State        pressure.State
	BacklogEmpty bool
	Decision     control.Decision
}

// Failure is one death of the pod as gatekeeper sees it: its error breaker
// opens while Inflight sequences of its window run.
type Failure struct {
	At       time.Time
	Inflight int
}

func (s Settings) withDefaults() Settings {
	if s.LimiterOff {
		s.Limiter = breaker.LimiterSettings{}
	} else if s.Limiter.QPS == 0 {
		s.Limiter.QPS, s.Limiter.Burst = 80, 40
	}
	if s.Slow.Level.Rules == nil {
		// The policy file's defaults, mapped as gatekeeper maps them: one
		// source for the rules, so the replay cannot drift from the product.
		def := control.SlowSettings(config.Default(), config.Upstream{})
		s.Slow.Level, s.Slow.QueueSignal = def.Level, def.QueueSignal
	}
	if s.MaxWait == 0 {
		s.MaxWait = 30 * time.Second
	}
	if s.Interval == 0 {
		s.Interval = 500 * time.Millisecond
	}
	if s.Sources == nil {
		s.Sources = PolicySources(config.Default())
	}
	if s.TTFTDeadline == 0 {
		s.TTFTDeadline = cmp.Or(config.Default().Queue.TTFTDeadline, -1)
	}
	s.SLO = s.SLO.withDefaults()
	return s
}

// request is one arrival on its way through the policy.
type request struct {
	a       Arrival
	id      uint64
	expires time.Duration // when it stops waiting: its deadline, or max_wait
	// byDeadline: expires is its time-to-first-token deadline, not max_wait
	byDeadline bool
	cost       queue.Cost // its token and memory estimates, given back with its slot
	waiting    bool
	// recovery: it arrived while the window was degraded or recovering.
	recovery bool
	// Its sequences on the engine (n of them, one per choice, as vLLM V1
	// runs n child requests): how many still run, what they generated, and
	// whether one failed or missed the SLO.
	running int
	tokens  int64
	failed  bool
	missed  bool
	// generated counts the tokens of every sequence that ended, failed
	// ones too (the service it had); firstToken is its earliest first token.
	generated  int64
	firstToken time.Duration
	// grant is its grant (Gatekeeper): the tenant and service to settle.
	grant queue.Grant
}

// seqs is how many sequences the request runs: its n, at least 1.
func (rq *request) seqs() int { return max(rq.a.N, 1) }

// runner holds one run's state. Not safe for concurrent use.
type runner struct {
	s          Settings
	e          *sim.Engine
	lim        *breaker.Limiter
	ctl        *control.Controller // the product's slow path (Gatekeeper)
	mon        *pressure.Monitor   // the product's pressure sources, polled on the virtual clock
	core       *queue.Core
	epoch      time.Time
	t          time.Duration
	bySeq      map[*sim.Seq]*request
	byID       map[uint64]*request
	expiry     expiryHeap // waiters, soonest to expire first
	nextID     uint64
	avail      bool
	res        Result
	hists      []hist
	recov      []hist // per class, arrivals during degraded or recovering
	phase      breaker.Phase
	classNames []string // the trace's class names, by index
	utilSum    float64
	samples    int64
	dead       time.Duration
	winSum     float64
	failures   []Failure // since the last pressure round, for Observer
	pm         postmortem
	fair       *fairness // per tenant of the trace: service, backlog, TTFT
	wasAlive   bool
	// nextRecord is when the next Sample is due.
	nextRecord time.Duration
}

// Run replays the trace against a fresh engine under the policy.
func Run(s Settings) (Result, error) {
	start := time.Now()
	s = s.withDefaults()
	src := s.Source
	horizon := s.Trace.Duration
	if src == nil {
		tr, err := NewTrace(s.Trace)
		if err != nil {
			return Result{}, err
		}
		src, horizon = tr, tr.Settings().Duration
	}
	classes := src.Classes()
	r, err := newRunner(s, len(classes))
	if err != nil {
		return Result{}, err
	}
	r.classNames = classes
	a, more := src.Next()
	tick := s.Interval
	for {
		t := tick
		if more && a.At < tick {
			t = a.At
		}
		if (horizon > 0 && t >= horizon) || (horizon <= 0 && !more) {
			break
		}
		r.advance(t)
		if t == tick {
			r.sample()
			r.record()
			r.recordRound()
			tick += s.Interval
		} else {
			r.arrive(a)
			a, more = src.Next()
		}
	}
	if err := src.Err(); err != nil {
		return Result{}, err
	}
	if horizon <= 0 {
		horizon = tick - s.Interval // the last sample taken
	}
	r.res.Horizon = horizon
	r.res.Outcomes.Unfinished = int64(r.running()) + int64(len(r.byID))
	r.res.OOMs = r.e.Metrics().OOMs
	r.res.Downtime = r.dead
	if r.samples > 0 {
		r.res.EffectiveUtilization = r.utilSum / float64(r.samples)
		r.res.MeanWindow = r.winSum / float64(r.samples)
	}
	r.res.Tenants, r.res.Fairness = r.fair.results()
	for i, name := range classes {
		r.res.Classes = append(r.res.Classes, ClassLatency{Name: name, P50: r.hists[i].quantile(0.5), P99: r.hists[i].quantile(0.99),
			RecoveryP99: r.recov[i].quantile(0.99), RecoveryServed: r.recov[i].n})
	}
	r.res.Wall = time.Since(start)
	return r.res, nil
}

func newRunner(s Settings, classes int) (*runner, error) {
	e, err := sim.New(s.Engine)
	if err != nil {
		return nil, err
	}
	r := &runner{s: s, e: e, epoch: time.Unix(0, 0).UTC(), wasAlive: true, bySeq: map[*sim.Seq]*request{}, fair: newFairness(),
		byID: map[uint64]*request{}, avail: true, hists: make([]hist, classes), recov: make([]hist, classes)}
	r.res.Policy, r.res.Seed = s.Policy, s.Trace.Seed
	r.res.GPUMemoryUtilization = e.Settings().GPUMemoryUtilization
	if s.Policy == None {
		return r, nil
	}
	ls := s.Limiter
	ls.Now = r.now
	if r.lim, err = breaker.NewLimiter(ls); err != nil {
		return nil, err
	}
	if s.Policy == QPSOnly {
		return r, nil
	}
	ss := s.Slow
	if ss.Window.MaxInflight == 0 {
		ss.Window.MaxInflight = e.Settings().MaxNumSeqs
	}
	if ss.Window.MinInflight == 0 {
		ss.Window.MinInflight = min(4, ss.Window.MaxInflight)
	}
	cs := controllerFor(ss, s.Memory, s.MaxInflightTokens)
	cs.DeadlineOrder = s.DeadlineOrder
	cs.Now = r.now
	if r.ctl, err = control.New(cs); err != nil {
		return nil, err
	}
	if r.mon, err = r.newMonitor(); err != nil {
		return nil, err
	}
	if r.core, err = queue.NewCore(s.Queue); err != nil {
		return nil, err
	}
	st, _, _ := r.ctl.State(upstream)
	r.core.SetWindow(upstream, st.Limit)
	r.core.SetAvailability(r.availability)
	return r, nil
}

func (r *runner) now() time.Time { return r.epoch.Add(r.t) }

// advance runs the engine to t and settles what ended on the way.
func (r *runner) advance(t time.Duration) {
	r.t = t
	r.e.Advance(t)
	alive := r.e.Alive()
	if r.wasAlive && !alive { // it died in this advance: keep the rounds that led there
		o, _ := r.e.LastOOM()
		r.res.OOMTimelines = append(r.res.OOMTimelines, OOMTimeline{OOM: o, Rounds: r.pm.timeline()})
	}
	r.wasAlive = alive
	if r.core != nil && !alive && r.avail {
		// every in-flight request just failed with a 500: the error breaker
		// opens (≥ 5 failures) and the health check agrees within a probe;
		// the pod is down and its waiters are refused at once. It failed
		// with what its window held (before the failures give it back), as
		// gatekeeper's breaker reports it; a load-related death caps the
		// window (control.Controller.PodFailed).
		r.avail = false
		if !r.s.NoFailureCeiling {
			f := Failure{At: r.now(), Inflight: r.core.InFlight(upstream)}
			r.ctl.PodFailedAt(f.At, upstream, f.Inflight)
			r.failures = append(r.failures, f)
		}
		r.grant(r.core.Dispatch(r.now()))
	}
	for _, s := range r.e.TakeFinished() {
		rq := r.bySeq[s]
		delete(r.bySeq, s)
		if r.seqEnded(rq, s) && r.core != nil {
			r.grant(r.core.Release(r.now(), upstream, rq.cost))
		}
	}
	for len(r.expiry) > 0 && r.expiry[0].expires <= t {
		rq := heap.Pop(&r.expiry).(*request)
		if !rq.waiting {
			continue
		}
		if waiting, grants := r.core.Cancel(r.now(), rq.id); waiting {
			rq.waiting = false
			delete(r.byID, rq.id)
			r.fair.left(rq.a.Tenant)
			if rq.byDeadline {
				r.res.Outcomes.Deadline++
			} else {
				r.res.Outcomes.QueueTimeout++
			}
			r.grant(grants)
		}
	}
}

// seqEnded counts one of rq's sequences as ended and reports whether it was
// the last; then the request's outcome is counted: served when every
// sequence finished (its tokens all of theirs, its latency the last one's,
// within the SLO when every sequence was), an upstream error otherwise.
func (r *runner) seqEnded(rq *request, s *sim.Seq) bool {
	rq.running--
	rq.generated += int64(s.Generated())
	if ft := s.FirstTokenAt(); s.Generated() > 0 && (rq.firstToken == 0 || ft < rq.firstToken) {
		rq.firstToken = ft
	}
	if s.State() == sim.SeqFinished {
		rq.tokens += int64(s.Generated())
		rq.missed = rq.missed || !r.s.SLO.met(r.classNames[rq.a.Class], rq.a.At, s)
	} else {
		rq.failed = true
	}
	if rq.running > 0 {
		return false
	}
	r.settle(rq, int64(rq.seqs())*int64(rq.a.Prompt)+2*rq.generated)
	if rq.failed {
		r.res.Outcomes.UpstreamError++
		return true
	}
	r.res.Outcomes.Served++
	r.res.GeneratedTokens += rq.tokens
	if !rq.missed {
		r.res.SLOTokens += rq.tokens
		r.res.SLOMet++
	}
	r.hists[rq.a.Class].add(s.FinishedAt() - rq.a.At)
	r.fair.served(rq.a.Tenant, rq.firstToken-rq.a.At)
	if rq.recovery {
		r.recov[rq.a.Class].add(s.FinishedAt() - rq.a.At)
	}
	return true
}

// running counts the requests with a sequence on the engine.
func (r *runner) running() int {
	seen := make(map[*request]bool, len(r.bySeq))
	for _, rq := range r.bySeq {
		seen[rq] = true
	}
	return len(seen)
}

// arrive takes one request through the policy.
func (r *runner) arrive(a Arrival) {
	r.res.Arrivals++
	r.fair.arrived(a.Tenant)
	if a.Class < 0 || a.Class >= len(r.hists) {
		a.Class = 0
	}
	rq := &request{a: a, recovery: r.phase == breaker.PhaseDegraded || r.phase == breaker.PhaseRecovering}
	if r.lim != nil {
		if err := r.lim.AllowAt(r.now(), ""); err != nil {
			r.res.Outcomes.RateLimited++
			return
		}
	}
	if r.core == nil {
		r.submit(rq)
		return
	}
	if r.ctl.Critical(upstream) || !r.avail {
		r.res.Outcomes.Overloaded++ // 503: critical, or no upstream can take it
		if r.avail {
			r.res.Outcomes.Shed++
		}
		return
	}
	r.nextID++
	rq.id = r.nextID
	// The arrival as classify would see its body, so that its estimates are
	// gatekeeper's own.
	c := classify.Request{Prompts: 1, N: rq.seqs(), PromptTokens: int64(a.Prompt), MaxTokens: int64(a.MaxToken),
		PromptLogprobs: a.PromptLogprobs}
	est := classify.Estimator{BytesPerLogit: r.s.BytesPerLogit, PromptLogprobsChunk: r.s.PromptLogprobsChunk} // 0: classify's defaults
	rq.cost = queue.Cost{Tokens: c.EstimatedTokens(), Seqs: c.Sequences(), Memory: est.Memory(c)}
	qr := queue.Request{ID: rq.id, Tokens: rq.cost.Tokens, Memory: rq.cost.Memory, Seqs: rq.cost.Seqs,
		Service: int64(rq.seqs()) * int64(a.Prompt+2*a.MaxToken)}
	if r.s.Tenants {
		qr.Tenant = a.Tenant
	}
	qr.Priority = r.s.TenantPriority[a.Tenant]
	// As gatekeeper waits: until its time-to-first-token deadline, or
	// max_wait; refused at once when the queue predicts it cannot start by
	// then.
	rq.expires = a.At + r.s.MaxWait
	if ttft := r.ttft(a); ttft > 0 && ttft < r.s.MaxWait {
		rq.expires, rq.byDeadline = a.At+ttft, true
	}
	qr.Deadline = r.epoch.Add(rq.expires)
	g, granted, err := r.core.Enqueue(r.now(), qr)
	switch {
	case errors.Is(err, queue.ErrDeadline):
		r.res.Outcomes.Deadline++
	case errors.Is(err, queue.ErrFull), errors.Is(err, queue.ErrTooLarge):
		r.res.Outcomes.QueueFull++
	case errors.Is(err, queue.ErrUnavailable), errors.Is(err, queue.ErrNoMemory):
		r.res.Outcomes.Overloaded++
	case err != nil:
		panic(fmt.Sprintf("replay: queue refused a fresh id: %v", err)) // ids are unique by construction
	case granted:
		r.fair.granted(g, a.Tenant, 0, false)
		r.submitGranted(rq, g)
	default:
		rq.waiting = true
		r.byID[rq.id] = rq
		heap.Push(&r.expiry, rq)
		r.fair.queued(a.Tenant)
	}
}

// ttft is an arrival's time-to-first-token deadline as gatekeeper reads it:
// the policy's, tightened by the one its client sends (ClientDeadlines: its
// class's SLO); 0 for none.
func (r *runner) ttft(a Arrival) time.Duration {
	d := max(r.s.TTFTDeadline, 0)
	if r.s.ClientDeadlines {
		if own := r.s.SLO.ttft(r.classNames[a.Class]); d == 0 || own < d {
			d = own
		}
	}
	return d
}

// submit hands a request to the engine, one sequence per choice (n; each
// with the whole prompt: the engine has no prefix cache, so children do not
// share their prompt's KV blocks, an upper bound); false when the pod is
// down.
func (r *runner) submit(rq *request) bool {
	sr := sim.Request{PromptTokens: rq.a.Prompt, MaxTokens: rq.a.MaxToken,
		OutputTokens: rq.a.Output, TopP: rq.a.TopP, PromptLogprobs: rq.a.PromptLogprobs}
	n := rq.seqs()
	seqs := make([]*sim.Seq, 0, n)
	for i := range n {
		s, err := r.e.Submit(sr)
		switch {
		case err != nil && i == 0: // connection refused while the pod restarts
			r.res.Outcomes.UpstreamError++
			return false
		case err != nil: // the engine decides on the request alone, at one instant
			panic(fmt.Sprintf("replay: the engine took a request's first sequence and refused its %d-th: %v", i+1, err))
		}
		seqs = append(seqs, s)
	}
	for _, s := range seqs {
		r.bySeq[s] = rq
	}
	rq.running = n
	r.pm.startedOne(rq.a.Class)
	return true
}

func (r *runner) submitGranted(rq *request, g queue.Grant) {
	rq.grant, rq.cost = g, g.Cost // its Cost names its tenant for Release
	if !r.submit(rq) {
		r.settle(rq, 0)
		r.grant(r.core.Release(r.now(), g.Upstream, g.Cost))
	}
}

// grant submits the requests the queue granted, and whatever their failures free.
func (r *runner) grant(gs []queue.Grant) {
	for len(gs) > 0 {
		g := gs[0]
		gs = gs[1:]
		rq := r.byID[g.ID]
		delete(r.byID, g.ID)
		rq.waiting = false
		if g.Err != nil { // refused: the pod went down while it waited (503)
			r.res.Outcomes.Overloaded++
			r.fair.left(rq.a.Tenant)
			continue
		}
		r.fair.granted(g, rq.a.Tenant, r.t-rq.a.At, true)
		rq.grant, rq.cost = g, g.Cost
		if !r.submit(rq) {
			r.settle(rq, 0)
			gs = append(gs, r.core.Release(r.now(), g.Upstream, g.Cost)...)
		}
	}
}
