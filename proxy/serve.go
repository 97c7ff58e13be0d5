package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/proxy/classify"
)

// exchange is one request's bookkeeping from arrival to its outcome.
type exchange struct {
	start  time.Time
	id     string
	policy *Policy
	tokens int64
	memory int64         // estimated transient memory per vocabulary entry (classify.Request.Memory)
	seqs   int           // sequences the pod runs for it (classify.Request.Sequences)
	kind   classify.Kind // what the route does
	class  *Class        // its traffic class; nil without classes
	model  string        // the body's "model"; "" when it has none
	stream bool          // the body's "stream": the response is a token stream
	skip   []string      // pods that do not serve the model
	// deadline is when waiting stops being of use: its time-to-first-token
	// deadline, or max_wait after its start; ttft says it is the former.
	deadline time.Time
	ttft     bool
	upstream string
	recorded bool

	// Set by dispatch for forward and complete, once a pod is chosen. (They
	// live here rather than in a struct of their own that points to the
	// exchange: that would move every exchange to the heap.)
	r       *http.Request // the client's request
	member  *member       // the pod the slot is on
	slot    Slot          // released by complete, once
	done    func(Result)  // the pod's error breaker callback, called by complete once
	body    []byte        // the buffered request body; nil when the route has none
	flight  *flight       // what the reverse proxy learns; set by forward
	retried bool          // it went to a second pod (at most once)
}

// serveTraffic runs the request pipeline of DESIGN §2 for every path that is
// not a health endpoint.
func (h *Handler) serveTraffic(w http.ResponseWriter, r *http.Request) {
	pol := h.policy.Load()
	ex := &exchange{start: h.now(), policy: pol}
	key := http.CanonicalHeaderKey(pol.RequestIDHeader)
	ids := r.Header[key]
	if len(ids) > 0 {
		ex.id = ids[0]
	}
	if !validRequestID(ex.id) {
		ex.id = h.ids.next()
	}
	// One slice for both headers where Header.Set would make one for each,
	// and none when the client sent just the id: capped at 1, nothing can
	// append to the shared slice in place, and nothing writes into it.
	if len(ids) != 1 || ids[0] != ex.id {
		ids = []string{ex.id}
	}
	ids = ids[:1:1]
	r.Header[key] = ids
	w.Header()[key] = ids

	route, rf := lookupRoute(r.Method, r.URL.EscapedPath())
	if rf != nil {
		if rf.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", route.Allow())
		}
		h.refuse(w, r, ex, *rf)
		return
	}
	ex.kind = route.Kind
	if h.refusing.Load() {
		h.refuse(w, r, ex, refusal{status: http.StatusServiceUnavailable, reason: ReasonDraining,
			message: "gatekeeper is shutting down; retry on another replica", retryAfter: pol.RetryAfter})
		return
	}
	if route.Kind == classify.KindModels && h.pool.knowsModels() {
		h.serveModels(w, r, ex) // the union of the pools, from gatekeeper itself
		return
	}
	body, ok := h.readBody(w, r, ex, route)
	if !ok {
		return
	}
	if !h.routeModel(w, r, ex, route) {
		return
	}
	skip, served, unknown := h.pool.notServing(ex.model)
	switch {
	case !served && unknown > 0: // a pod that may serve it has not said what it serves
		h.refuse(w, r, ex, refusal{status: http.StatusServiceUnavailable, reason: ReasonNoUpstream,
			message:    "no upstream is known to serve the model `" + ex.model + "` yet (their model lists are not known); retry later",
			retryAfter: pol.RetryAfter})
		return
	case !served:
		h.refuse(w, r, ex, refusal{status: http.StatusNotFound, reason: ReasonModelNotFound, errType: "invalid_request_error",
			message: "The model `" + ex.model + "` does not exist.", param: "model"})
		return
	}
	ex.skip = skip
	ex.class = pol.Classes.place(r, route.Path, h.clientKey(r, pol))
	ex.setDeadline(r)
	if !h.admitFast(w, r, ex) || !h.admitSlow(w, r, ex) {
		return
	}
	h.dispatch(w, r, ex, body)
}

// routeModel applies the rule for a request that names no model while
// gatekeeper routes by model: it goes to the one model the pods serve, and
// counts against that model's limits; with several it is refused with 400,
// since any pod would be a guess. Routes without a JSON body (audio
// uploads) are not routed by model.
func (h *Handler) routeModel(w http.ResponseWriter, r *http.Request, ex *exchange, route Route) bool {
	if ex.model != "" || !route.Kind.JSON() || !h.pool.knowsModels() {
		return true
	}
	if m, ok := h.pool.soleModel(); ok {
		ex.model = m
		return true
	}
	h.refuse(w, r, ex, refusal{status: http.StatusBadRequest, reason: ReasonBadRequest, errType: "invalid_request_error",
		message: "you must provide a model parameter: the upstreams serve several models", param: "model"})
	return false
}

// serveAmbiguous refuses a request whose connection sent ambiguous framing
// (see framing.Guard); it never reaches a pod.
func (h *Handler) serveAmbiguous(w http.ResponseWriter, r *http.Request) {
	pol := h.policy.Load()
	ex := &exchange{start: h.now(), policy: pol, id: h.ids.next()}
	w.Header().Set(pol.RequestIDHeader, ex.id)
	h.refuse(w, r, ex, badRequest("ambiguous request framing: Content-Length with Transfer-Encoding, "+
		"a folded header line or a malformed chunk", ""))
}

// readBody reads and classifies the body of routes that carry one. It answers
// 413 past max_body_bytes and 400 for malformed bodies, which never reach a pod.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, ex *exchange, route Route) ([]byte, bool) {
	if !route.Body {
		return nil, true
	}
	pol := ex.policy
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		// A compressed body cannot be classified, and what is not classified
		// is not forwarded.
		h.refuse(w, r, ex, refusal{status: http.StatusUnsupportedMediaType, reason: ReasonBadRequest,
			message: "compressed request bodies are not accepted; send the body uncompressed"})
		return nil, false
	}
	if r.ContentLength > pol.MaxBodyBytes {
		h.refuseLarge(w, r, ex)
		return nil, false
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		// ReadFrom wants MinRead bytes free before it can see EOF; growing
		// by them too makes the body one allocation instead of two and a copy.
		buf.Grow(int(r.ContentLength) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, pol.MaxBodyBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		h.refuseLarge(w, r, ex)
		return nil, false
	case err != nil:
		if r.Context().Err() != nil {
			h.finish(r, ex, OutcomeClientClosed, StatusClientClosed)
			return nil, false
		}
		h.refuse(w, r, ex, badRequest("could not read the request body", ""))
		return nil, false
	}
	body := buf.Bytes()
	c, err := classify.Parse(route.Kind, body, classify.Estimator{CharsPerToken: pol.CharsPerToken,
		DefaultMaxTokens: pol.DefaultMaxTokens, BytesPerLogit: pol.BytesPerLogit, PromptLogprobsChunk: pol.PromptLogprobsChunk})
	if err != nil {
		h.refuse(w, r, ex, badRequestFrom(err))
		return nil, false
	}
	ex.tokens, ex.memory, ex.seqs, ex.model, ex.stream = c.Estimated, c.Memory, c.Sequences(), c.Model, c.Stream
	return body, true
}

// clientKey is the value of the per-client limit's header, "" without one.
func (h *Handler) clientKey(r *http.Request, pol *Policy) string {
	if hdr := pol.ClientKeyHeader; hdr != "" {
		return r.Header.Get(hdr)
	}
	return ""
}

// admitFast asks the fast breaker (token buckets): the class's own bucket
// first (a class refusal must not spend the global budget), then the
// global and per-client ones.
func (h *Handler) admitFast(w http.ResponseWriter, r *http.Request, ex *exchange) bool {
	var err error
	if ex.class != nil && h.opts.ClassLimiter != nil {
		err = h.opts.ClassLimiter.Allow(ex.class.Name)
	}
	if err == nil && ex.model != "" && h.opts.ModelLimiter != nil {
		err = h.opts.ModelLimiter.Allow(ex.model)
	}
	if err == nil && h.opts.Limiter != nil {
		err = h.opts.Limiter.Allow(h.clientKey(r, ex.policy))
	}
	if err == nil {
		return true
	}
	var ra retryAfterer
	wait := time.Second
	if errors.As(err, &ra) {
		wait = ra.RetryAfter()
	}
	return h.decide(w, r, ex, refusal{status: http.StatusTooManyRequests, reason: ReasonRateLimited,
		errType: "rate_limit_error", message: "rate limit exceeded; retry after the Retry-After delay", retryAfter: wait})
}

// admitSlow refuses new work at once while every upstream is critical or
// none can take work at all.
func (h *Handler) admitSlow(w http.ResponseWriter, r *http.Request, ex *exchange) bool {
	switch {
	case ex.class != nil && ex.class.Sheddable() && h.pool.allDegraded(ex.skip...):
		return h.decide(w, r, ex, refusal{status: http.StatusServiceUnavailable, reason: ReasonShedPriority,
			message: "the upstreams are under memory pressure and class " + strconv.Quote(ex.class.Name) +
				" is shed first; retry later", retryAfter: ex.policy.RetryAfter})
	case h.pool.allCritical(ex.skip...):
		return h.decide(w, r, ex, refusal{status: http.StatusServiceUnavailable, reason: ReasonOverloaded,
			message: "GPU memory pressure is critical on every upstream; retry later", retryAfter: ex.policy.RetryAfter})
	case !h.pool.anyAvailable(ex.skip...):
		return h.decide(w, r, ex, refusal{status: http.StatusServiceUnavailable, reason: ReasonNoUpstream,
			message: h.pool.whyDown(ex.skip...) + "; retry later", retryAfter: h.pool.retryAfter(ex.policy.RetryAfter, ex.skip...)})
	}
	return true
}

// decide enforces a refusal, or in observe mode only counts and logs it.
func (h *Handler) decide(w http.ResponseWriter, r *http.Request, ex *exchange, rf refusal) bool {
	enforced := !ex.policy.Observe
	h.metrics.decided(rf.reason, enforced)
	if !enforced {
		h.log.LogAttrs(r.Context(), slog.LevelDebug, "observe: would refuse",
			slog.String("request_id", ex.id), slog.String("status", string(rf.reason)))
		return true
	}
	h.refuse(w, r, ex, rf)
	return false
}

// dispatch waits for a window slot on an upstream whose error breaker admits
// the request, then forwards it.
func (h *Handler) dispatch(w http.ResponseWriter, r *http.Request, ex *exchange, body []byte) {
	ctx, cancel := context.WithTimeout(r.Context(), ex.deadline.Sub(h.now())) // on the handler's clock, as ex.deadline
	defer cancel()
	exclude := slices.Clip(ex.skip) // pods that do not serve the model; appends copy
	var slot Slot                   // a retry's slot, taken on another pod by the forward before
	for attempt := 0; ; attempt++ {
		if slot == nil {
			queued := h.now()
			var err error
			if slot, err = h.opts.Admission.Acquire(ctx, ex.need(), ex.priority(), exclude); err != nil {
				h.refuseAdmission(w, r, ex, err)
				return
			}
			h.metrics.waited(ex.tokens, h.now().Sub(queued))
		}
		m, ok := h.pool.get(slot.Upstream())
		if !ok { // removed by a reload between dispatch and now
			slot.Release()
			exclude = append(exclude, slot.Upstream())
			slot = nil
			continue
		}
		done := func(Result) {}
		if m.Gate != nil {
			d, err := m.Gate.Allow()
			if err != nil {
				// It moved between the queue's look and ours: just opened
				// (now Down: Acquire routes elsewhere or refuses at once), or
				// its last probe went to another request (now Paused: wait
				// for the verdict). Not excluded: it may take us back.
				slot.Release()
				slot = nil
				if attempt >= 2*len(h.pool.list())+2 { // a bound, not a policy
					h.refuseAdmission(w, r, ex, ErrNoUpstream)
					return
				}
				continue
			}
			done = d
		}
		ex.r, ex.member, ex.slot, ex.done, ex.body = r, m, slot, done, body
		if slot = h.forward(w, ex); slot == nil {
			return
		}
		// The pod refused it before any byte reached the client, or could
		// not be reached: once more, on the pod whose slot forward took.
		ex.retried = true
		exclude = append(exclude, m.Name)
	}
}

// refuseAdmission answers a failed Acquire.
func (h *Handler) refuseAdmission(w http.ResponseWriter, r *http.Request, ex *exchange, err error) {
	if r.Context().Err() != nil { // the client left while queued: never sent upstream
		h.finish(r, ex, OutcomeClientClosed, StatusClientClosed)
		return
	}
	if errors.Is(err, context.DeadlineExceeded) && ex.ttft { // waited until its first token was no longer of use
		err = fmt.Errorf("%w: %w", ErrDeadline, err)
	}
	status, reason := statusFor(err)
	retry := ex.policy.RetryAfter
	var ra retryAfterer
	switch {
	case reason == ReasonDeadline && errors.As(err, &ra) && ra.RetryAfter() > 0:
		retry = min(ra.RetryAfter(), maxRetryAfter) // when the work ahead will have drained
	case reason == ReasonNoUpstream:
		retry = h.pool.retryAfter(retry, ex.skip...) // when an open error breaker probes again
	}
	msg := admissionMessage(reason)
	switch {
	case reason == ReasonDeadline && !ex.ttft:
		msg = "the request cannot start within the queue's max_wait; retry after the Retry-After delay"
	case reason == ReasonTooLarge:
		msg = "the request's estimated " + strconv.FormatInt(ex.tokens, 10) + " tokens (prompt + max_tokens, for every sequence of n) " +
			"exceed what gatekeeper's queue can hold (queue.max_tokens); lower max_tokens or n"
		retry = 0
	}
	rf := refusal{status: status, reason: reason, message: msg, retryAfter: retry}
	if status == http.StatusBadRequest {
		rf.errType = "invalid_request_error"
	}
	h.refuse(w, r, ex, rf)
}

// maxRetryAfter caps a predicted Retry-After: the OpenAI SDKs honour it up
// to 60 s.
const maxRetryAfter = 60 * time.Second

// setDeadline sets when ex's waiting stops being of use: its class's
// time-to-first-token deadline or the policy's, tightened by the one its
// client sends (DeadlineHeader, in milliseconds), or else max_wait (always
// in observe mode).
func (ex *exchange) setDeadline(r *http.Request) {
	pol := ex.policy
	d := pol.TTFTDeadline
	if ex.class != nil && ex.class.TTFTDeadline > 0 {
		d = ex.class.TTFTDeadline
	}
	if pol.DeadlineHeader != "" {
		if v := r.Header.Get(pol.DeadlineHeader); v != "" {
			ms, err := strconv.ParseInt(v, 10, 64)
			if own := time.Duration(ms) * time.Millisecond; err == nil && ms > 0 && ms < int64(pol.MaxWait/time.Millisecond) && (d == 0 || own < d) {
				d = own
			}
		}
	}
	// Observe mode refuses nothing it did not refuse before: only max_wait.
	ex.ttft = d > 0 && d < pol.MaxWait && !pol.Observe
	if !ex.ttft {
		d = pol.MaxWait
	}
	ex.deadline = ex.start.Add(d)
}

// admissionMessage is the client's message for a failed Acquire.
func admissionMessage(reason Reason) string {
	switch reason {
	case ReasonQueueFull:
		return "the admission queue is full; retry later"
	case ReasonQueueTimeout:
		return "waited too long for capacity; retry later"
	case ReasonDraining:
		return "gatekeeper is shutting down; retry on another replica"
	case ReasonNoUpstream:
		return "no upstream can take the request; retry later"
	case ReasonDeadline:
		return "the request cannot start before its time-to-first-token deadline; retry after the Retry-After delay"
	case ReasonNoMemory:
		return "the request needs more GPU memory than any upstream reports free for it (its sampled sequences, n/best_of, prompt_logprobs); retry later or ask for less"
	}
	return "could not admit the request"
}

// refuse writes a refusal and records its outcome.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, ex *exchange, rf refusal) {
	if rf.reason != "" {
		h.metrics.rejected(rf.reason)
	}
	writeRefusal(w, rf)
	h.finish(r, ex, rf.reason.outcome(), rf.status)
}

// finish records the request's one outcome.
func (h *Handler) finish(r *http.Request, ex *exchange, o Outcome, status int) {
	if ex.recorded {
		return
	}
	ex.recorded = true
	d := h.now().Sub(ex.start)
	h.metrics.outcome(o, d)
	if ex.class != nil {
		h.metrics.classOutcome(ex.class.Name, o)
	}
	if h.log.Enabled(r.Context(), slog.LevelDebug) {
		h.log.LogAttrs(r.Context(), slog.LevelDebug, "request",
			slog.String("request_id", ex.id), slog.String("upstream", ex.upstream),
			slog.String("state", string(o)), slog.Int("status", status), slog.Duration("duration", d))
	}
}

// Bounds on reading what a client still sends of a body refused as too
// large, after its 413 (nginx's lingering close).
const (
	lingerBytes = 64 << 20
	lingerTime  = 5 * time.Second
)

// refuseLarge answers 413 and then reads, within bounds, what the client
// still sends of the body before the connection closes. A client that sends
// its whole body before it reads the answer (Python's http.client) would
// otherwise meet a reset while it writes, and never read the 413.
func (h *Handler) refuseLarge(w http.ResponseWriter, r *http.Request, ex *exchange) {
	w.Header().Set("Connection", "close")
	h.refuse(w, r, ex, tooLarge(ex.policy.MaxBodyBytes))
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	_ = rc.SetReadDeadline(time.Now().Add(lingerTime)) // a connection deadline: the real clock
	_, _ = io.CopyN(io.Discard, r.Body, lingerBytes)
}

func tooLarge(limit int64) refusal {
	return refusal{status: http.StatusRequestEntityTooLarge, reason: ReasonBadRequest,
		message: "request body is larger than the limit of " + strconv.FormatInt(limit, 10) + " bytes"}
}

func badRequest(msg, param string) refusal {
	return refusal{status: http.StatusBadRequest, reason: ReasonBadRequest, message: msg, param: param}
}

// badRequestFrom turns a classification error into the client's 400.
func badRequestFrom(err error) refusal {
	rf := refusal{status: http.StatusBadRequest, reason: ReasonBadRequest,
		errType: "invalid_request_error", message: "invalid request body"}
	if e, ok := err.(*classify.Error); ok {
		rf.message, rf.param = e.ClientMessage(), e.Param
	}
	return rf
}

// need is what ex asks of a pod's window.
func (ex *exchange) need() Need {
	return Need{Seqs: ex.seqs, Tokens: ex.tokens, Memory: ex.memory, Deadline: ex.deadline}
}

// priority is the queue rank of ex's class; 0 without classes.
func (ex *exchange) priority() int {
	if ex.class == nil {
		return 0
	}
	return ex.class.Priority
}
