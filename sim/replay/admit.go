package replay

import (
	"container/heap"
	"errors"
	"fmt"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/classify"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// arrive takes one attempt through the policy.
func (r *runner) arrive(rq *request) {
	a := rq.a
	rq.recovery = r.phase == breaker.PhaseDegraded || r.phase == breaker.PhaseRecovering
	if r.lim != nil {
		if err := r.lim.AllowTenantAt(r.now(), r.clientKey(a), r.limiterTenant(a)); err != nil {
			r.res.Outcomes.RateLimited++
			var le *breaker.LimitError
			wait := time.Second // decide's default for a limiter that names no wait
			if errors.As(err, &le) {
				wait = le.Wait
			}
			r.ended(rq, endRefused, retryAfterHeader(wait))
			return
		}
	}
	if r.core == nil {
		r.submit(rq, r.direct())
		return
	}
	if open, up := r.open(); !open {
		r.res.Outcomes.Overloaded++ // 503: critical, or no upstream can take it
		if up {
			r.res.Outcomes.Shed++
		}
		r.refused(rq)
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
		Service: int64(rq.seqs()) * int64(a.Prompt+2*a.MaxToken), Prefix: rq.c.routeBlocks(r.s.model())}
	if r.s.Tenants {
		qr.Tenant = a.Tenant
	}
	qr.Priority = r.s.TenantPriority[a.Tenant]
	// As gatekeeper waits: until its time-to-first-token deadline, or
	// max_wait, from when this attempt reached it; refused at once when
	// the queue predicts it cannot start by then.
	rq.expires = rq.start + r.s.MaxWait
	if ttft := r.ttft(a); ttft > 0 && ttft < r.s.MaxWait {
		rq.expires, rq.byDeadline = rq.start+ttft, true
	}
	qr.Deadline = r.epoch.Add(rq.expires)
	g, granted, err := r.core.Enqueue(r.now(), qr)
	var de *queue.DeadlineError
	switch {
	case errors.As(err, &de):
		r.res.Outcomes.Deadline++
		r.ended(rq, endRefused, retryAfterHeader(min(de.RetryAfter(), maxRetryAfter)))
	case errors.Is(err, queue.ErrDeadline):
		r.res.Outcomes.Deadline++
		r.refused(rq)
	case errors.Is(err, queue.ErrTooLarge):
		r.res.Outcomes.QueueFull++
		r.ended(rq, endFatal, 0) // 400: no wait admits it
	case errors.Is(err, queue.ErrFull):
		r.res.Outcomes.QueueFull++
		r.refused(rq)
	case errors.Is(err, queue.ErrUnavailable), errors.Is(err, queue.ErrNoMemory):
		r.res.Outcomes.Overloaded++
		r.refused(rq)
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

// maxRetryAfter caps the Retry-After of a deadline refusal, as
// gatekeeper's decide package does.
const maxRetryAfter = 60 * time.Second

// refused ends an attempt with a 503 that carries the policy's
// Retry-After (shed.retry_after).
func (r *runner) refused(rq *request) { r.ended(rq, endRefused, retryAfterHeader(r.s.RetryAfter)) }

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

// submit hands an attempt to pod p's engine, one sequence per choice (n;
// each with the whole prompt, and with the same block hashes when the
// trace gives the prompt an identity (Arrival.Content): a child looks up
// the blocks its siblings cached, as vLLM's children of one request do);
// false when the pod is down (a refused connection: the attempt has ended).
func (r *runner) submit(rq *request, p *pod) bool {
	sr := sim.Request{PromptTokens: rq.a.Prompt, MaxTokens: rq.a.MaxToken,
		OutputTokens: rq.a.Output, TopP: rq.a.TopP, PromptLogprobs: rq.a.PromptLogprobs,
		BlockHashes: rq.c.kvBlocks(p.e.Settings().BlockSize)}
	n := rq.seqs()
	seqs := make([]*sim.Seq, 0, n)
	for i := range n {
		s, err := p.e.Submit(sr)
		switch {
		case err != nil && i == 0: // connection refused while the pod restarts
			r.res.Outcomes.UpstreamError++
			r.ended(rq, endFailed, 0)
			return false
		case err != nil: // the engine decides on the request alone, at one instant
			panic(fmt.Sprintf("replay: the engine took a request's first sequence and refused its %d-th: %v", i+1, err))
		}
		seqs = append(seqs, s)
	}
	for _, s := range seqs {
		r.bySeq[s] = rq
	}
	rq.live, rq.pod = seqs, p
	p.started++
	rq.running, rq.sent = n, r.t
	r.pm.startedOne(rq.a.Class)
	return true
}

func (r *runner) submitGranted(rq *request, g queue.Grant) {
	rq.grant, rq.cost = g, g.Cost // its Cost names its tenant for Release
	if !r.submit(rq, r.pod(g.Upstream)) {
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
			r.refused(rq)
			continue
		}
		r.fair.granted(g, rq.a.Tenant, r.t-rq.start, true)
		rq.grant, rq.cost = g, g.Cost
		if !r.submit(rq, r.pod(g.Upstream)) {
			r.settle(rq, 0)
			gs = append(gs, r.core.Release(r.now(), g.Upstream, g.Cost)...)
		}
	}
}
