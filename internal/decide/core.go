package decide

import (
	"errors"
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
	// Pools, if set, counts each model's arrivals, refusals and waiters
	// for the scaling signal's model pools. Nil: none.
	Pools PoolCounter
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
	tenantLim    TenantLimiter // limiter, when it shares by tenant; else nil
	classLimiter ClassLimiter
	modelLimiter ModelLimiter
	quotas       Quotas
	rec          Recorder
	now          func() time.Time
	policy       atomic.Pointer[Policy]
	podRefused   func(pod string)
	ready        func() error // Options.Ready; nil when none
	pools        PoolCounter  // Options.Pools; nil when none
	draining     atomic.Bool  // StartDrain or Drain was called: readiness is off
	refusing     atomic.Bool  // Drain was called: new work is refused
}

// New builds a Core.
func New(o Options) (*Core, error) {
	if o.Registry == nil || o.Admission == nil {
		return nil, errors.New("decide: Options.Registry and Options.Admission are required")
	}
	c := &Core{reg: o.Registry, admission: o.Admission, limiter: o.Limiter, classLimiter: o.ClassLimiter,
		modelLimiter: o.ModelLimiter, quotas: o.Quotas, rec: o.Recorder, now: o.Now, podRefused: o.OnPodRefused, ready: o.Ready, pools: o.Pools}
	if c.now == nil {
		c.now = time.Now
	}
	c.tenantLim, _ = o.Limiter.(TenantLimiter)
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
	HasPriority    bool   // the body names its own "priority" (vLLM's): a class's is not forwarded
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
	// Prefix is the hashes of its prompt's leading blocks (route.Blocks),
	// for the queue's pod scoring; nil when not computed (prefix.go).
	Prefix []uint64
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
	req.HasPriority = cl.HasPriority
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
