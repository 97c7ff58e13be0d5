package decide

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
)

// admit runs the rest of the pipeline for a classified, routed request:
// its class (from h and path), its deadline, the fast breaker (429), the
// slow breaker (503 while every pod it may use is critical, or its class is
// shed), then a slot on a pod whose error breaker admits it, waiting in the
// queue until its deadline or ctx's end. On success the caller holds the
// Slot: Finish reports the pod's result, then the caller releases it.
func (c *Core) admit(ctx context.Context, req *Request, h Headers, path string) (*Admitted, *Refusal) {
	pol := req.Policy
	key := c.clientKey(h, pol)
	req.Class = pol.Classes.place(h, path, key)
	req.Tenant, req.Weight = pol.Fair.tenant(h, key)
	req.setDeadline(h)
	if rf := c.admitFast(ctx, req, key); rf != nil {
		return nil, rf
	}
	if rf := c.chargeQuota(ctx, req, key); rf != nil {
		return nil, rf
	}
	if rf := c.admitSlow(req); rf != nil {
		c.refund(req)
		return nil, rf
	}
	c.poolWaiting(req, 1)
	adm, rf := c.acquire(ctx, req, slices.Clip(req.Skip))
	c.poolWaiting(req, -1)
	if adm == nil {
		c.refund(req) // refused, or the client left while it waited
	}
	return adm, rf
}

// Admitted is a request's slot on a pod, with the pod's error-breaker
// callback.
type Admitted struct {
	Pod  *pods.Member
	Slot Slot
	// Done reports the request's result to the pod's error breaker;
	// Finish calls it exactly once, before the front's Slot.Release.
	Done func(pods.Result)
}

// clientKey is the value of the per-client limit's header, "" without one.
func (c *Core) clientKey(h Headers, pol *Policy) string {
	if hdr := pol.ClientKeyHeader; hdr != "" {
		return h.Get(hdr)
	}
	return ""
}

// admitFast asks the fast breaker (token buckets): the class's own bucket
// first (a class refusal must not spend the global budget), then the
// model's, then the global and per-client ones, the global one shared by
// tenant when fairness is on and the limiter can (TenantLimiter).
func (c *Core) admitFast(ctx context.Context, req *Request, key string) *Refusal {
	var err error
	if req.Class != nil && c.classLimiter != nil {
		err = c.classLimiter.Allow(ctx, req.Class.Name)
	}
	if err == nil && req.Model != "" && c.modelLimiter != nil {
		err = c.modelLimiter.Allow(ctx, req.Model)
	}
	if err == nil && c.limiter != nil {
		if c.tenantLim != nil && req.Policy.Fair != nil {
			err = c.tenantLim.AllowTenant(ctx, key, req.Tenant)
		} else {
			err = c.limiter.Allow(ctx, key)
		}
	}
	if err == nil {
		return nil
	}
	wait := defaultRateLimitedRetry
	var ra retryAfterer
	if errors.As(err, &ra) {
		wait = ra.RetryAfter()
	}
	return c.decided(req, Refuse(ReasonRateLimited, admissionMessage(ReasonRateLimited), wait, wait))
}

// admitSlow refuses new work at once while every pod it may use is
// critical or none can take work at all.
func (c *Core) admitSlow(req *Request) *Refusal {
	pol, skip := req.Policy, req.Skip
	switch {
	case req.Class != nil && req.Class.sheddable() && c.reg.AllDegraded(skip...):
		return c.decided(req, Refuse(ReasonShedPriority, "the upstreams are under memory pressure and class "+
			strconv.Quote(req.Class.Name)+" is shed first; retry later", 0, pol.RetryAfter))
	case c.reg.AllCritical(skip...):
		return c.decided(req, Refuse(ReasonOverloaded, "GPU memory pressure is critical on every upstream; retry later", 0, pol.RetryAfter))
	case !c.reg.AnyAvailable(skip...):
		return c.decided(req, Refuse(ReasonNoUpstream, c.reg.WhyDown(skip...)+"; retry later", c.reg.RetryAfter(pol.RetryAfter, skip...), pol.RetryAfter))
	}
	return nil
}

// decided enforces a refusal (returns it), or in observe mode only counts
// it (returns nil).
func (c *Core) decided(req *Request, rf Refusal) *Refusal {
	enforced := !req.Policy.Observe
	if c.rec != nil {
		c.rec.Decided(string(rf.Reason), enforced)
	}
	if !enforced {
		return nil
	}
	return &rf
}

// acquire waits for a slot on a pod whose error breaker admits the request,
// until its Deadline (on the core's clock, as Deadline), every attempt
// within it.
func (c *Core) acquire(ctx context.Context, req *Request, exclude []string) (*Admitted, *Refusal) {
	for attempt := 0; ; attempt++ {
		queued := c.now()
		need := req.need()
		if need.wait = req.Deadline.Sub(queued); need.wait <= 0 {
			return nil, c.admissionRefusal(ctx, req, context.DeadlineExceeded)
		}
		slot, err := c.admission.Acquire(ctx, need, req.priority(), exclude)
		if err != nil {
			return nil, c.admissionRefusal(ctx, req, err)
		}
		waited := c.now().Sub(queued)
		req.Waited += waited
		if c.rec != nil {
			c.rec.Waited(req.Tokens, waited)
		}
		m, ok := c.reg.Get(slot.Upstream())
		if !ok { // removed by a reload between dispatch and now
			slot.Release()
			exclude = append(exclude, slot.Upstream())
			continue
		}
		done, ok := allow(m)
		if !ok {
			// It moved between the queue's look and ours: just opened (now
			// Down: Acquire routes elsewhere or refuses at once), or its
			// last probe went to another request (now Paused: wait for the
			// verdict). Not excluded: it may take us back.
			slot.Release()
			if attempt >= 2*c.reg.Len()+2 { // a bound, not a policy
				return nil, c.admissionRefusal(ctx, req, ErrNoUpstream)
			}
			continue
		}
		return &Admitted{Pod: m, Slot: slot, Done: done}, nil
	}
}

// admissionRefusal answers a failed Acquire; nil when the client left (the
// front records that itself).
func (c *Core) admissionRefusal(ctx context.Context, req *Request, err error) *Refusal {
	if errors.Is(ctx.Err(), context.Canceled) || errors.Is(err, context.Canceled) {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) && req.TTFT { // waited until its first token was no longer of use
		err = fmt.Errorf("%w: %w", errDeadline, err)
	}
	pol := req.Policy
	reason := reasonFor(err)
	retry := pol.RetryAfter
	var ra retryAfterer
	switch {
	case reason == ReasonDeadline && errors.As(err, &ra) && ra.RetryAfter() > 0:
		retry = min(ra.RetryAfter(), maxRetryAfter) // when the work ahead will have drained
	case reason == ReasonNoUpstream:
		retry = c.reg.RetryAfter(retry, req.Skip...) // when an open error breaker probes again
	}
	msg := admissionMessage(reason)
	switch {
	case reason == ReasonDeadline && !req.TTFT:
		msg = "the request cannot start within the queue's max_wait; retry after the Retry-After delay"
	case reason == ReasonTooLarge:
		msg = "the request's estimated " + strconv.FormatInt(req.Tokens, 10) + " tokens (prompt + max_tokens, for every sequence of n) " +
			"exceed what gatekeeper's queue can hold (queue.max_tokens); lower max_tokens or n"
	}
	rf := Refuse(reason, msg, retry, pol.RetryAfter)
	return &rf
}

// setDeadline sets when req's waiting stops being of use: its class's
// time-to-first-token deadline or the policy's, tightened by the one its
// client sends (DeadlineHeader, in milliseconds), or else max_wait (always
// in observe mode).
func (req *Request) setDeadline(h Headers) {
	pol := req.Policy
	d := pol.TTFTDeadline
	if req.Class != nil && req.Class.TTFTDeadline > 0 {
		d = req.Class.TTFTDeadline
	}
	if pol.DeadlineHeader != "" {
		if v := h.Get(pol.DeadlineHeader); v != "" {
			ms, err := strconv.ParseInt(v, 10, 64)
			if own := time.Duration(ms) * time.Millisecond; err == nil && ms > 0 && ms < int64(pol.MaxWait/time.Millisecond) && (d == 0 || own < d) {
				d = own
			}
		}
	}
	// Observe mode refuses nothing it did not refuse before: only max_wait.
	req.TTFT = d > 0 && d < pol.MaxWait && !pol.Observe
	if !req.TTFT {
		d = pol.MaxWait
	}
	req.Deadline = req.Start.Add(d)
}

// need is what req asks of a pod's window.
func (req *Request) need() Need {
	return Need{Seqs: req.Seqs, tokens: req.Tokens, memory: req.Memory, deadline: req.Deadline,
		tenant: req.Tenant, weight: req.Weight, Service: req.Policy.Fair.service(req.Prompt, req.Output), prefix: req.Prefix}
}

// priority is the queue rank of req's class; 0 without classes.
func (req *Request) priority() int {
	if req.Class == nil {
		return 0
	}
	return req.Class.Priority
}

// Dispatch asks the queue to look at every pod's availability again (after
// a health check changed a pod's state).
func (c *Core) Dispatch() { c.admission.Dispatch() }
