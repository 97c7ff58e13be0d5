package replay

import (
	"cmp"
	"slices"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// TenantResult is what one tenant of the trace (Arrival.Tenant) got, whether
// or not the queue shared between tenants (Settings.Tenants).
type TenantResult struct {
	Name     string
	Arrivals int64
	// Served counts its requests served (the others were refused, failed,
	// or had not finished when the trace ended).
	Served int64
	// TTFT is the time to first token of its served requests, from arrival
	// (gatekeeper's queueing included).
	TTFTP50, TTFTP99 time.Duration
	// Wait is how long its granted requests waited in gatekeeper's queue,
	// from arrival to grant (Gatekeeper; 0 for the other policies): the
	// share of TTFT the queue decides, the rest is the pod's.
	WaitP50, WaitP99 time.Duration
	// PodWait is how long its served requests waited inside the pod, from
	// being sent to the step that first scheduled them (the remainder of
	// the step running when it came, then vLLM's own waiting queue);
	// Prefill from that step's start to the first token (its prefill
	// chunks and the steps they share).
	PodWaitP50, PodWaitP99 time.Duration
	PrefillP50, PrefillP99 time.Duration
	// Tail is where the time to first token of its slowest 1 % of served
	// requests went, the mean of each part over them.
	Tail TTFTParts
	// RateLimited counts its attempts the fast breaker refused (429);
	// Refused those refused otherwise on arrival (a predicted deadline
	// miss, a full queue, a critical or down pod); Left its waiters that
	// left the queue without a grant (deadline or max wait passed, pod
	// down). Each is an attempt its client may retry.
	RateLimited, Refused, Left int64
	// Service is the service granted to it, in weighted tokens (prompt + 2 ×
	// output): charged at each grant with the estimate (prompt + 2 ×
	// max_tokens) and trued up with the real output as each request ends,
	// the queue's own accounting.
	Service int64
}

// Fairness is how evenly the queue served tenants while they were
// backlogged (gatekeeper). For every two tenants, over each interval in
// which both had requests waiting, at every grant to one of them: the
// difference of their Service relative to what it was when the interval
// began (VTC's measure; every tenant's weight is 1 in the replay).
type Fairness struct {
	// MaxDiff is the largest such difference over the run; MaxCost the
	// largest service a single grant was charged; Bound = 2 × MaxCost.
	MaxDiff, MaxCost, Bound int64
	// MaxDiffCharged is the same measure on the charges alone (the
	// estimates, before any settle).
	MaxDiffCharged int64
	// MaxBeyondCorrections is the largest difference minus the settle
	// corrections made to either tenant since its interval began: what VTC
	// bounds by Bound when charges are estimates (queue's package doc).
	MaxBeyondCorrections int64
	// Intervals counts the intervals; Grants the grants measured in them.
	Intervals, Grants int64
}

// fairness follows every tenant's backlog and service through a run. Not
// safe for concurrent use.
type fairness struct {
	idx     map[string]int
	t       []tenantTrack
	pairs   [][]pairTrack // [i][j], i < j
	maxCost int64
	out     Fairness
}

type tenantTrack struct {
	res                      TenantResult
	waiting                  int
	service, charged         int64
	corrections              int64 // |settle corrections| so far
	ttft, wait, pod, prefill hist
	parts                    []TTFTParts // each served request's, for Tail
}

// TTFTParts splits a request's time to first token (TTFT, from the call's
// arrival) into its parts, which sum to it: Retry, until the attempt that
// was served was sent (earlier attempts refused, and the client's backoff);
// Queue, in gatekeeper's queue; Pod, in the pod before its first step;
// Prefill, from that step's start to the first token.
type TTFTParts struct {
	TTFT, Retry, Queue, Pod, Prefill time.Duration
}

// noteScheduled keeps the earliest step that scheduled one of rq's
// sequences.
func (rq *request) noteScheduled(s *sim.Seq) {
	if at := s.ScheduledAt(); at > 0 && (rq.scheduled == 0 || at < rq.scheduled) {
		rq.scheduled = at
	}
}

// ttftParts is a served request's TTFTParts.
func (rq *request) ttftParts() TTFTParts {
	sched := max(rq.scheduled, rq.sent) // a sequence scheduled at the engine's time 0
	return TTFTParts{TTFT: rq.firstToken - rq.a.At, Retry: rq.start - rq.a.At, Queue: rq.sent - rq.start,
		Pod: sched - rq.sent, Prefill: rq.firstToken - sched}
}

// tail is the mean of each part over the slowest ceil(1 %) of ps by TTFT.
func tail(ps []TTFTParts) TTFTParts {
	if len(ps) == 0 {
		return TTFTParts{}
	}
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b TTFTParts) int { return cmp.Compare(b.TTFT, a.TTFT) })
	k := (len(ps) + 99) / 100
	var m TTFTParts
	for _, p := range ps[:k] {
		m.TTFT, m.Retry, m.Queue, m.Pod, m.Prefill = m.TTFT+p.TTFT, m.Retry+p.Retry, m.Queue+p.Queue, m.Pod+p.Pod, m.Prefill+p.Prefill
	}
	n := time.Duration(k)
	return TTFTParts{TTFT: m.TTFT / n, Retry: m.Retry / n, Queue: m.Queue / n, Pod: m.Pod / n, Prefill: m.Prefill / n}
}

// pairTrack is two tenants' current interval, while both have waiters.
type pairTrack struct {
	active            bool
	base, baseCharged int64 // i's service − j's when it began
	baseCorr          int64 // the two tenants' corrections so far, when it began
}

func newFairness() *fairness { return &fairness{idx: map[string]int{}} }

// tenant returns name's index, adding it.
func (f *fairness) tenant(name string) int {
	i, ok := f.idx[name]
	if !ok {
		i = len(f.t)
		f.idx[name] = i
		f.t = append(f.t, tenantTrack{res: TenantResult{Name: name}})
		for k := range f.pairs {
			f.pairs[k] = append(f.pairs[k], pairTrack{})
		}
		f.pairs = append(f.pairs, make([]pairTrack, i+1))
	}
	return i
}

func (f *fairness) pair(i, j int) (p *pairTrack, sign int64) {
	if i < j {
		return &f.pairs[i][j], 1
	}
	return &f.pairs[j][i], -1
}

func (f *fairness) arrived(name string) { f.t[f.tenant(name)].res.Arrivals++ }

// queued counts a waiter of name; the intervals it completes begin.
func (f *fairness) queued(name string) {
	i := f.tenant(name)
	f.t[i].waiting++
	if f.t[i].waiting > 1 {
		return
	}
	for j := range f.t {
		if j == i || f.t[j].waiting == 0 {
			continue
		}
		p, sign := f.pair(i, j)
		*p = pairTrack{active: true, base: sign * (f.t[i].service - f.t[j].service),
			baseCharged: sign * (f.t[i].charged - f.t[j].charged), baseCorr: f.t[i].corrections + f.t[j].corrections}
		f.out.Intervals++
	}
}

// left counts a waiter of name gone without a grant; its intervals end
// once it has none.
func (f *fairness) left(name string) {
	i := f.tenant(name)
	f.t[i].res.Left++
	f.t[i].waiting--
	f.end(i)
}

func (f *fairness) end(i int) {
	if f.t[i].waiting > 0 {
		return
	}
	for j := range f.t {
		if j != i {
			p, _ := f.pair(i, j)
			p.active = false
		}
	}
}

// granted counts a grant of service to name after it waited wait; waited
// says it came from the queue, not at once on arrival (then name had no
// waiter).
func (f *fairness) granted(g queue.Grant, name string, wait time.Duration, waited bool) {
	i := f.tenant(name)
	t := &f.t[i]
	t.wait.add(wait)
	t.service += g.Service
	t.charged += g.Service
	f.maxCost = max(f.maxCost, g.Service)
	if !waited {
		return
	}
	for j := range f.t {
		p, sign := f.pair(i, j)
		if j == i || !p.active {
			continue
		}
		f.out.Grants++
		diff := abs(sign*(t.service-f.t[j].service) - p.base)
		corr := t.corrections + f.t[j].corrections - p.baseCorr
		f.out.MaxDiff = max(f.out.MaxDiff, diff)
		f.out.MaxDiffCharged = max(f.out.MaxDiffCharged, abs(sign*(t.charged-f.t[j].charged)-p.baseCharged))
		f.out.MaxBeyondCorrections = max(f.out.MaxBeyondCorrections, diff-corr)
	}
	t.waiting--
	f.end(i)
}

// refused counts what the arrival of an attempt of name refused: the
// outcomes' change across it.
func (f *fairness) refused(name string, before, after Outcomes) {
	t := &f.t[f.tenant(name)]
	t.res.RateLimited += after.RateLimited - before.RateLimited
	t.res.Refused += after.Deadline - before.Deadline + after.QueueFull - before.QueueFull + after.Overloaded - before.Overloaded
}

// clientKey is the fast breaker's client key of an arrival: its tenant
// when per-client buckets are on (Limiter.ClientQPS), as gatekeeper keys
// them by fast_breaker.per_client.header, which is also the tenant when
// fairness.tenant_header is left out; else none.
func (r *runner) clientKey(a Arrival) string {
	if r.s.Limiter.ClientQPS > 0 {
		return a.Tenant
	}
	return ""
}

// limiterTenant is the tenant the fast breaker shares its global bucket by
// (Limiter.Shares), as gatekeeper's core passes the queue's tenant: the
// arrival's tenant while tenants are on, else none.
func (r *runner) limiterTenant(a Arrival) string {
	if r.s.Tenants {
		return a.Tenant
	}
	return ""
}

// settled trues up name's service: its grant charged charged, it cost actual.
func (f *fairness) settled(name string, charged, actual int64) {
	t := &f.t[f.tenant(name)]
	t.service += actual - charged
	t.corrections += abs(actual - charged)
}

// served records a served request's time to first token and its parts.
func (f *fairness) served(rq *request) {
	t := &f.t[f.tenant(rq.a.Tenant)]
	p := rq.ttftParts()
	t.res.Served++
	t.ttft.add(p.TTFT)
	t.pod.add(p.Pod)
	t.prefill.add(p.Prefill)
	t.parts = append(t.parts, p)
}

// results returns the tenants' results and the fairness figures.
func (f *fairness) results() ([]TenantResult, Fairness) {
	var out []TenantResult
	for _, t := range f.t {
		r := t.res
		r.TTFTP50, r.TTFTP99, r.Service = t.ttft.quantile(0.5), t.ttft.quantile(0.99), t.service
		r.WaitP50, r.WaitP99 = t.wait.quantile(0.5), t.wait.quantile(0.99)
		r.PodWaitP50, r.PodWaitP99 = t.pod.quantile(0.5), t.pod.quantile(0.99)
		r.PrefillP50, r.PrefillP99 = t.prefill.quantile(0.5), t.prefill.quantile(0.99)
		r.Tail = tail(t.parts)
		out = append(out, r)
	}
	fr := f.out
	fr.MaxCost, fr.Bound = f.maxCost, 2*f.maxCost
	return out, fr
}

func abs(x int64) int64 { return max(x, -x) }

// settle trues up the service rq's grant was charged (its estimate) with
// what it cost, actual (Gatekeeper; nothing for the other policies, which
// grant nothing).
func (r *runner) settle(rq *request, actual int64) {
	if r.core == nil {
		return
	}
	g := rq.grant
	r.core.Settle(g.Tenant, g.Priority, g.Service, actual)
	r.fair.settled(rq.a.Tenant, g.Service, actual)
}
