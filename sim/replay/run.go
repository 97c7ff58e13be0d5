package replay

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/route"
	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// request is one attempt of a call on its way through the policy.
type request struct {
	c *call
	// a is the call's arrival: a.At is when the user sent it, so latency
	// and the SLO count from there; start is when this attempt was sent,
	// which gatekeeper's own deadlines count from.
	a       Arrival
	start   time.Duration
	id      uint64
	closed  bool          // its client closed it
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
	live    []*sim.Seq
	pod     *pod // where its sequences run
	tokens  int64
	failed  bool
	missed  bool
	// generated counts the tokens of every sequence that ended, failed
	// ones too (the service it had); firstToken is its earliest first token.
	generated  int64
	firstToken time.Duration
	// grant is its grant (Gatekeeper): the tenant and service to settle.
	grant queue.Grant
	// sent is when it was handed to the engine; scheduled when the engine
	// first scheduled one of its sequences (TTFTParts).
	sent, scheduled time.Duration
}

// seqs is how many sequences the request runs: its n, at least 1.
func (rq *request) seqs() int { return max(rq.a.N, 1) }

// firstTokenSeen reports whether one of its sequences has sampled a token.
func (rq *request) firstTokenSeen() bool {
	for _, s := range rq.live {
		if s.Generated() > 0 {
			return true
		}
	}
	return rq.firstToken > 0
}

// runner holds one run's state. Not safe for concurrent use.
type runner struct {
	s          Settings
	pods       []*pod // the pool, vllm-0 first
	all        []*pod // every pod the run started, in order
	draining   []*pod // out of the pool, finishing their requests
	scale      *scaler
	slow       breaker.SlowSettings // each pod's slow breaker
	gpuTime    time.Duration        // pods asked for, running or draining, summed up to gpuAt
	gpuAt      time.Duration
	peak       int           // the most pods in the pool at once
	rr         int           // the next pod in turn without a queue (direct)
	router     *route.Router // the prefix-only and gatekeeper routings' scorer
	ttfts      hist          // every served request's time to first token
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
	res        Result
	hists      []hist
	recov      []hist // per class, arrivals during degraded or recovering
	phase      breaker.Phase
	classNames []string // the trace's class names, by index
	utilSum    float64
	utilN      int64 // pod samples behind utilSum
	samples    int64
	dead       time.Duration
	winSum     float64
	failures   []Failure // since the last pressure round, for Observer
	pm         postmortem
	fair       *fairness // per tenant of the trace: service, backlog, TTFT
	// nextRecord is when the next Sample is due.
	nextRecord time.Duration
	// each trace class's client; the clients' timers, and the draws of
	// their retries' jitter
	clients []Client
	// each class's requests, and those that met the SLO
	classArrivals, classMet []int64
	events                  eventHeap
	evSeq                   uint64
	rng                     *rand.Rand
}

// Run replays the trace against a fresh engine under the policy.
func Run(s Settings) (Result, error) {
	start := time.Now()
	s = s.withDefaults()
	if s.Autoscale.Mode != StaticPool && !s.Policy.queued() {
		return Result{}, fmt.Errorf("replay: Autoscale needs gatekeeper's queue (deadline-only, gatekeeper, gatekeeper+exporter), not %s", s.Policy)
	}
	src, horizon, err := s.source()
	if err != nil {
		return Result{}, err
	}
	classes := src.Classes()
	r, err := newRunner(s, len(classes))
	if err != nil {
		return Result{}, err
	}
	r.classNames = classes
	for _, name := range classes {
		r.clients = append(r.clients, s.clientOf(name))
	}
	r.classArrivals, r.classMet = make([]int64, len(classes)), make([]int64, len(classes))
	a, more := src.Next()
	tick := s.Interval
	for {
		// The next thing to happen: a sampling round, an arrival or a
		// client's timer; at one instant in that order.
		t, what := tick, 0
		if more && a.At < t {
			t, what = a.At, 1
		}
		if len(r.events) > 0 && r.events[0].at < t {
			t, what = r.events[0].at, 2
		}
		if (horizon > 0 && t >= horizon) || (horizon <= 0 && !more) {
			break
		}
		r.advance(t)
		switch what {
		case 0:
			r.sample()
			r.record()
			r.recordRound()
			tick += s.Interval
		case 1:
			r.newCall(a)
			a, more = src.Next()
		default:
			r.fire(heap.Pop(&r.events).(event))
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
	r.res.Requests.Unfinished = r.res.Arrivals - r.res.Requests.ended()
	r.res.OOMs = r.ooms()
	r.res.Downtime = r.dead
	if r.samples > 0 {
		r.res.EffectiveUtilization = r.utilSum / float64(r.utilN)
		r.res.MeanWindow = r.winSum / float64(r.samples)
	}
	r.finishPool()
	r.res.Tenants, r.res.Fairness = r.fair.results()
	for i, name := range classes {
		r.res.Classes = append(r.res.Classes, ClassLatency{Name: name, P50: r.hists[i].quantile(0.5), P99: r.hists[i].quantile(0.99),
			RecoveryP99: r.recov[i].quantile(0.99), RecoveryServed: r.recov[i].n, Arrivals: r.classArrivals[i], Met: r.classMet[i]})
	}
	r.res.Wall = time.Since(start)
	return r.res, nil
}

// source is the run's arrivals and how long it lasts: Settings.Source (for
// Trace.Duration, or to its end when that is 0), the conversations, or the
// synthetic trace.
func (s Settings) source() (Source, time.Duration, error) {
	switch {
	case s.Source != nil:
		return s.Source, s.Trace.Duration, nil
	case s.Conversations.Rate > 0:
		ct, err := NewConversationTrace(s.Conversations, s.Trace.Duration, s.Trace.Seed)
		if err != nil {
			return nil, 0, err
		}
		return ct, ct.duration, nil
	}
	tr, err := NewTrace(s.Trace)
	if err != nil {
		return nil, 0, err
	}
	return tr, tr.Settings().Duration, nil
}

func newRunner(s Settings, classes int) (*runner, error) {
	pods, err := newPods(s)
	if err != nil {
		return nil, err
	}
	e := pods[0].e
	r := &runner{s: s, pods: pods, all: slices.Clone(pods), epoch: time.Unix(0, 0).UTC(), bySeq: map[*sim.Seq]*request{}, fair: newFairness(),
		byID: map[uint64]*request{}, hists: make([]hist, classes), recov: make([]hist, classes),
		rng: rand.New(rand.NewPCG(s.Trace.Seed, 0xc11e47))} // the clients' own stream: the trace's draws are unchanged
	r.res.Policy, r.res.Seed, r.res.Scenario = s.Policy, s.Trace.Seed, s.Scenario
	r.res.GPUMemoryUtilization = e.Settings().GPUMemoryUtilization
	if s.Policy == None {
		return r, nil
	}
	ls := s.Limiter
	ls.Now = r.now
	if r.lim, err = breaker.NewLimiter(ls); err != nil {
		return nil, err
	}
	if !s.Policy.queued() {
		return r, nil
	}
	ss := s.Slow
	if ss.Window.MaxInflight == 0 {
		ss.Window.MaxInflight = e.Settings().MaxNumSeqs
	}
	if ss.Window.MinInflight == 0 {
		ss.Window.MinInflight = min(4, ss.Window.MaxInflight)
	}
	r.slow = ss
	cs := controllerFor(ss, s.Memory, s.MaxInflightTokens, r.pods)
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
	for _, p := range r.pods {
		st, _, _ := r.ctl.State(p.name)
		r.core.SetWindow(p.name, st.Limit)
	}
	r.core.SetAvailability(r.availability)
	if err := r.setRouting(); err != nil {
		return nil, err
	}
	if s.Autoscale.Mode != StaticPool {
		if r.scale, err = newScaler(s.Autoscale); err != nil {
			return nil, err
		}
	}
	r.round()
	return r, nil
}

func (r *runner) now() time.Time { return r.epoch.Add(r.t) }

// advance runs the pods to t and settles what ended on the way: every
// engine first, then each pod's death, then what each pod finished, in
// the pool's order.
func (r *runner) advance(t time.Duration) {
	r.t = t
	serving := r.serving()
	for _, p := range serving {
		p.e.Advance(t)
	}
	for _, p := range serving {
		r.checkDeath(p)
	}
	for _, p := range serving {
		for _, s := range p.e.TakeFinished() {
			rq := r.bySeq[s]
			delete(r.bySeq, s)
			if !r.seqEnded(rq, s) {
				continue
			}
			p.released++
			if r.core != nil {
				r.grant(r.core.Release(r.now(), rq.grant.Upstream, rq.cost))
			}
		}
	}
	r.expire(t)
}

// expire refuses the waiters whose deadline or max_wait passed by t.
func (r *runner) expire(t time.Duration) {
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
			r.refused(rq)
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
	rq.noteScheduled(s)
	if ft := s.FirstTokenAt(); s.Generated() > 0 && (rq.firstToken == 0 || ft < rq.firstToken) {
		rq.firstToken = ft
		rq.c.firstToken = rq.c.firstToken || !rq.closed
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
	rq.live = nil
	r.settle(rq, int64(rq.seqs())*int64(rq.a.Prompt)+2*rq.generated)
	switch {
	case rq.closed:
		r.res.Outcomes.ClientClosed++
		return true
	case rq.failed:
		r.res.Outcomes.UpstreamError++
		r.ended(rq, endFailed, 0)
		return true
	}
	r.res.Outcomes.Served++
	r.served(rq)
	r.res.GeneratedTokens += rq.tokens
	if !rq.missed {
		r.res.SLOTokens += rq.tokens
		r.res.SLOMet++
		r.res.Requests.Met++
		r.classMet[rq.a.Class]++
	} else {
		r.res.Requests.Late++
	}
	r.hists[rq.a.Class].add(s.FinishedAt() - rq.a.At)
	r.fair.served(rq)
	r.ttfts.add(rq.firstToken - rq.a.At)
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
