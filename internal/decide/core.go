package decide

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/classify"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/quota"
)

// Headers is what the core reads of a request's headers (http.Header and the
// endpoint picker's header map both satisfy it).
type Headers interface{ Get(key string) string }

// Recorder is where the core reports what it decided; the fronts' request
// metrics satisfy it. Nil records nothing.
type Recorder interface {
	// Decided counts a refusal decision, enforced or (observe mode) not.
	Decided(decision string, enforced bool)
	// Waited records a request's time in the admission queue.
	Waited(tokens int64, d time.Duration)
	// TenantService counts the weighted tokens a tenant was finally
	// charged for a request (fairness on): a named tenant by its name, the
	// others as "other", a request without a tenant value as "anonymous".
	TenantService(tenant string, service int64)
}

// Options configures a Core.
type Options struct {
	Registry     *pods.Registry
	Admission    Admission
	Limiter      Limiter      // global and per-client buckets; nil admits all
	ClassLimiter ClassLimiter // nil: no class buckets
	ModelLimiter ModelLimiter // nil: no model buckets
	Quotas       Quotas       // nil: no token quotas
	Recorder     Recorder
	Policy       Policy
	Now          func() time.Time
	// OnPodRefused, if set, hears from Finish that a pod answered 503 or
	// 429 itself (its own queue is full), so its window can be cut. It
	// must not block.
	OnPodRefused func(pod string)
	// Ready, if set, is one more condition of the core's readiness
	// (Unready): a non-nil error makes it unready with the error's text
	// (cluster mode: no share of any pod's window yet). Nil: none. It must
	// not block.
	Ready func() error
}

// Core is the decision core both fronts ask: it classifies a request,
// routes it by model, places it in a traffic class, runs the fast and the
// slow breaker and takes a slot on a pod through the admission queue and
// the pod's error breaker. It does no I/O of its own. Safe for concurrent
// use.
type Core struct {
	reg          *pods.Registry
	admission    Admission
	limiter      Limiter
	classLimiter ClassLimiter
	modelLimiter ModelLimiter
	quotas       Quotas
	rec          Recorder
	now          func() time.Time
	policy       atomic.Pointer[Policy]
	podRefused   func(pod string)
	ready        func() error // Options.Ready; nil when none
	draining     atomic.Bool  // StartDrain or Drain was called: readiness is off
	refusing     atomic.Bool  // Drain was called: new work is refused
}

// New builds a Core.
func New(o Options) (*Core, error) {
	if o.Registry == nil || o.Admission == nil {
		return nil, errors.New("decide: Options.Registry and Options.Admission are required")
	}
	c := &Core{reg: o.Registry, admission: o.Admission, limiter: o.Limiter, classLimiter: o.ClassLimiter,
		modelLimiter: o.ModelLimiter, quotas: o.Quotas, rec: o.Recorder, now: o.Now, podRefused: o.OnPodRefused, ready: o.Ready}
	if c.now == nil {
		c.now = time.Now
	}
	c.SetPolicy(o.Policy)
	return c, nil
}

// Registry is the pod registry the core decides over.
func (c *Core) Registry() *pods.Registry { return c.reg }

// Policy is the running policy.
func (c *Core) Policy() *Policy { return c.policy.Load() }

// SetPolicy swaps in a reloaded policy; requests already admitted keep the
// one they started with. Observe mode changes the pods' availability, so
// the queue looks again.
func (c *Core) SetPolicy(p Policy) {
	p = p.withDefaults()
	c.policy.Store(&p)
	if c.reg.SetObserve(p.Observe) {
		c.admission.Dispatch()
	}
}

// Request is one request's decision state from arrival to its end. A front
// begins it (Begin, or Decide does) and keeps it by value in its own
// bookkeeping (no allocation of its own) until Finish.
type Request struct {
	Start  time.Time
	Policy *Policy
	Kind   classify.Kind
	Tokens int64 // estimated tokens (prompt + max output, × n)
	// Prompt and Output are the estimate's parts as a pod's usage reports
	// them: the prompt's tokens once, the output bound of every sequence.
	Prompt, Output int64
	Memory         int64  // estimated transient memory per vocabulary entry
	Seqs           int    // sequences the pod runs for it
	Model          string // the body's "model"; "" when it has none
	Stream         bool   // the body asks for a token stream
	MaxTokens      int64  // the body's output bound per sequence; 0 when it names none
	Class          *Class // its traffic class; nil without classes
	// Skip are the pods it must not go to: those that do not serve its
	// model, and (endpoint picker) those outside Envoy's subset hint.
	Skip []string
	// Deadline is when waiting stops being of use: its time-to-first-token
	// deadline, or max_wait after Start; TTFT says it is the former.
	Deadline time.Time
	TTFT     bool
	// Tenant and Weight are who it is for in the queue's fair share ("" and
	// 0 without fairness).
	Tenant string
	Weight float64
	// Waited is how long it waited in the admission queue for its slot
	// (every attempt), set by Admit.
	Waited time.Duration

	quota quota.Settler // its charge on the token quotas; nil when none
}

// Begin starts a request's decision state on the running policy; Decide
// sets its Kind once it knows the route.
func (c *Core) Begin() Request {
	return Request{Start: c.now(), Policy: c.policy.Load()}
}

// classify reads body's model, stream flag and estimates (a 400 refusal for
// a body the classifier will not estimate).
func (c *Core) classify(req *Request, body []byte) *Refusal {
	pol := req.Policy
	cl, err := classify.Parse(req.Kind, body, classify.Estimator{CharsPerToken: pol.CharsPerToken,
		DefaultMaxTokens: pol.DefaultMaxTokens, BytesPerLogit: pol.BytesPerLogit, PromptLogprobsChunk: pol.PromptLogprobsChunk})
	if err != nil {
		rf := badBody(err)
		return &rf
	}
	req.Tokens, req.Memory, req.Seqs, req.Model, req.Stream = cl.Estimated, cl.Memory, cl.Sequences(), cl.Model, cl.Stream
	req.Prompt, req.Output = cl.PromptTokens, mulSat(int64(cl.Sequences()), cl.MaxTokens)
	if !cl.DefaultMax {
		req.MaxTokens = cl.MaxTokens
	}
	return nil
}

// badBody is the 400 of a body the classifier refused: its message and
// param when it says which part is wrong.
func badBody(err error) Refusal {
	rf := BadRequest("invalid request body", "")
	if e, ok := err.(*classify.Error); ok {
		rf.message, rf.param = e.ClientMessage(), e.Param
	}
	return rf
}

// Route picks the pods that may serve req's model. A request that names no
// model while gatekeeper routes by model goes to the one model the pods
// serve; with several it is refused (any pod would be a guess). Kinds
// without a JSON body are not routed by model.
func (c *Core) Route(req *Request) *Refusal {
	pol := req.Policy
	if req.Model == "" && req.Kind.JSON() && c.reg.KnowsModels() {
		m, ok := c.reg.SoleModel()
		if !ok {
			rf := BadRequest("you must provide a model parameter: the upstreams serve several models", "model")
			rf.errType = errTypeInvalidRequest
			return &rf
		}
		req.Model = m
	}
	skip, served, unknown := c.reg.NotServing(req.Model)
	switch {
	case !served && unknown > 0: // a pod that may serve it has not said what it serves
		rf := Refuse(ReasonNoUpstream, "no upstream is known to serve the model `"+req.Model+
			"` yet (their model lists are not known); retry later", 0, pol.RetryAfter)
		return &rf
	case !served:
		rf := Refuse(ReasonModelNotFound, "The model `"+req.Model+"` does not exist.", 0, 0)
		rf.param = "model"
		return &rf
	}
	req.Skip = append(req.Skip, skip...)
	return nil
}

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
	ctx, cancel := context.WithTimeout(ctx, req.Deadline.Sub(c.now())) // on the core's clock, as Deadline
	defer cancel()
	adm, rf := c.acquire(ctx, req, slices.Clip(req.Skip))
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
// model's, then the global and per-client ones.
func (c *Core) admitFast(ctx context.Context, req *Request, key string) *Refusal {
	var err error
	if req.Class != nil && c.classLimiter != nil {
		err = c.classLimiter.Allow(ctx, req.Class.Name)
	}
	if err == nil && req.Model != "" && c.modelLimiter != nil {
		err = c.modelLimiter.Allow(ctx, req.Model)
	}
	if err == nil && c.limiter != nil {
		err = c.limiter.Allow(ctx, key)
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

// acquire waits for a slot on a pod whose error breaker admits the request.
func (c *Core) acquire(ctx context.Context, req *Request, exclude []string) (*Admitted, *Refusal) {
	for attempt := 0; ; attempt++ {
		queued := c.now()
		slot, err := c.admission.Acquire(ctx, req.need(), req.priority(), exclude)
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
		tenant: req.Tenant, weight: req.Weight, Service: req.Policy.Fair.service(req.Prompt, req.Output)}
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
