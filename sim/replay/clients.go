package replay

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"time"
)

// Client is how the clients of one trace class behave (Settings.Clients):
// as real ones do, they retry what was refused or failed, the way the
// OpenAI SDK does, and interactive users give up. Its zero value is the
// replay's old client, which neither retries nor gives up.
type Client struct {
	// Patience is how long an interactive user waits for the first token,
	// from the request's first attempt; then the client closes the
	// connection, which aborts the request at the pod (vLLM frees its KV
	// blocks) or takes it out of gatekeeper's queue. 0 means it waits.
	Patience time.Duration
	// Timeout is the SDK's timeout of one attempt (openai-python's default
	// is 600 s): an attempt not finished by then is closed and retried.
	// 0 means none.
	Timeout time.Duration
	// Retries is how many times a refused or failed attempt is sent again
	// (429, 5xx, a refused connection): openai-python's max_retries, 2.
	Retries int
	// Stream says the answer streams: a failure after the first token
	// arrives inside a 200 and is not retried.
	Stream bool
}

// The OpenAI SDK's retries (openai-python v3.3.1, _constants.py and
// _base_client.py's _calculate_retry_timeout and _should_retry): it
// retries 408, 409, 429, 5xx, timeouts and refused connections, twice; a
// Retry-After above 0 and at most 120 s is honoured as it is (60 s before
// v2.52.0), a longer one ends the retries; otherwise the n-th retry (n from
// 0) waits min(0.5 s × 2ⁿ, 8 s) × (1 − 0.25 × U[0,1)). Its timeout is 600 s.
const (
	sdkMaxRetries        = 2
	sdkTimeout           = 600 * time.Second
	sdkInitialRetryDelay = 500 * time.Millisecond
	sdkMaxRetryDelay     = 8 * time.Second
	sdkMaxRetryAfter     = 120 * time.Second
)

// DefaultPatience is how long an interactive user waits for the first
// token before giving up: the 10 s limit of Nielsen's response-time limits
// (Usability Engineering, 1993, ch. 5), past which a user's attention
// leaves the dialogue.
const DefaultPatience = 10 * time.Second

// SDKClient is an application calling through the OpenAI SDK with its
// defaults: two retries, a 600 s timeout, no user waiting on it.
func SDKClient() Client { return Client{Timeout: sdkTimeout, Retries: sdkMaxRetries} }

// ChatClient is an interactive chat user behind the SDK: the answer
// streams, the user gives up after DefaultPatience without a first token.
func ChatClient() Client {
	return Client{Patience: DefaultPatience, Timeout: sdkTimeout, Retries: sdkMaxRetries, Stream: true}
}

// DefaultClients are the clients of the default trace's classes: short
// requests are interactive chats, long ones documents sent by
// applications. A class they do not name gets SDKClient.
func DefaultClients() map[string]Client {
	return map[string]Client{"short": ChatClient(), "long": SDKClient()}
}

// clientOf is the client of a trace class under s.Clients.
func (s Settings) clientOf(class string) Client {
	if s.Clients == nil {
		if c, ok := DefaultClients()[class]; ok {
			return c
		}
		return SDKClient()
	}
	return s.Clients[class]
}

// retryDelay is how long the SDK waits before its retry number n (from 0):
// the server's Retry-After when it sent one in (0, 120 s], else the
// exponential backoff with its jitter.
func retryDelay(n int, retryAfter time.Duration, rng *rand.Rand) time.Duration {
	jitter := 1 - 0.25*rng.Float64() // drawn every time, so the draws do not depend on the answer
	if retryAfter > 0 && retryAfter <= sdkMaxRetryAfter {
		return retryAfter
	}
	d := min(float64(sdkInitialRetryDelay)*math.Pow(2, float64(n)), float64(sdkMaxRetryDelay))
	return time.Duration(d * jitter)
}

// retryAfterHeader is a delay as the client reads gatekeeper's Retry-After:
// whole seconds, at least 1 (decide.RetryAfterSeconds).
func retryAfterHeader(d time.Duration) time.Duration {
	return max(time.Duration(math.Ceil(d.Seconds()))*time.Second, time.Second)
}

// call is one request as its user sees it: the first attempt and the
// retries the client sends, until it is answered or given up.
type call struct {
	a      Arrival // At: when the user sent it
	client Client
	tries  int      // attempts sent
	rq     *request // the attempt in flight; nil between attempts
	done   bool
	// firstToken: a first token reached the user (a stream that fails
	// after it is not retried).
	firstToken bool
	// kv and route are its prompt's block hashes, the engine's (for
	// kvSize-token blocks) and gatekeeper's (prompt.go), once computed.
	kv, route []uint64
	kvSize    int
}

// ending is how an attempt ended, as its client sees it.
type ending int

const (
	endRefused ending = iota // 429 or 503 from gatekeeper
	endFailed                // 5xx from the pod, or a refused connection
	endFatal                 // an answer not worth retrying (400)
	endClosed                // the client closed it
)

// event is a client's timer: a retry falls due, a user gives up, or an
// attempt times out.
type event struct {
	at   time.Duration
	seq  uint64 // ties: the earlier timer first
	kind eventKind
	c    *call
	rq   *request // evTimeout: the attempt it bounds
}

type eventKind uint8

const (
	evRetry eventKind = iota
	evAbandon
	evTimeout
)

// eventHeap orders the timers, soonest first. It implements container/heap.
type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// at schedules a timer.
func (r *runner) at(t time.Duration, kind eventKind, c *call, rq *request) {
	r.evSeq++
	heap.Push(&r.events, event{at: t, seq: r.evSeq, kind: kind, c: c, rq: rq})
}

// newCall is a trace arrival: the user's request, sent for the first time.
func (r *runner) newCall(a Arrival) {
	r.res.Arrivals++
	r.fair.arrived(a.Tenant)
	if a.Class < 0 || a.Class >= len(r.hists) {
		a.Class = 0
	}
	c := &call{a: a, client: r.clients[a.Class]}
	r.classArrivals[a.Class]++
	if c.client.Patience > 0 {
		r.at(a.At+c.client.Patience, evAbandon, c, nil)
	}
	r.send(c)
}

// send sends the call's next attempt.
func (r *runner) send(c *call) {
	c.tries++
	r.res.Attempts++
	rq := &request{c: c, a: c.a, start: r.t}
	c.rq = rq
	if c.client.Timeout > 0 {
		r.at(r.t+c.client.Timeout, evTimeout, c, rq)
	}
	before := r.res.Outcomes
	r.arrive(rq)
	r.fair.refused(c.a.Tenant, before, r.res.Outcomes)
}

// fire runs a timer that fell due.
func (r *runner) fire(ev event) {
	c := ev.c
	if c.done {
		return
	}
	switch ev.kind {
	case evRetry:
		r.send(c)
	case evAbandon:
		if c.rq != nil && c.rq.firstTokenSeen() {
			return // the answer streams: the user reads on
		}
		c.done = true
		r.res.Requests.Abandoned++
		r.close(c.rq)
	case evTimeout:
		if c.rq != ev.rq || ev.rq == nil {
			return // that attempt already ended
		}
		rq := c.rq
		r.close(rq)
		r.retryOrGiveUp(c, endFailed, 0)
	}
}

// close closes an attempt's connection: a waiter leaves gatekeeper's queue,
// a request on the pod is aborted there (its outcome is counted when the
// engine hands its sequences back).
func (r *runner) close(rq *request) {
	if rq == nil || rq.closed {
		return
	}
	rq.closed = true
	rq.c.rq = nil
	switch {
	case rq.waiting:
		if waiting, grants := r.core.Cancel(r.now(), rq.id); waiting {
			rq.waiting = false
			delete(r.byID, rq.id)
			r.fair.left(rq.a.Tenant)
			r.res.Outcomes.ClientClosed++
			r.grant(grants)
		}
	case rq.running > 0:
		for _, s := range rq.live {
			rq.pod.e.Abort(s)
		}
	}
}

// ended is told how an attempt that did not succeed ended: the client
// retries, or the call ends there.
func (r *runner) ended(rq *request, how ending, retryAfter time.Duration) {
	c := rq.c
	if c.rq == rq {
		c.rq = nil
	}
	if c.done || rq.closed {
		return
	}
	r.retryOrGiveUp(c, how, retryAfter)
}

// retryOrGiveUp schedules the call's next attempt as the SDK would, or
// ends the call when it may not retry.
func (r *runner) retryOrGiveUp(c *call, how ending, retryAfter time.Duration) {
	retries := c.tries - 1
	streamed := c.client.Stream && c.firstToken
	if how != endFatal && !streamed && retries < c.client.Retries && retryAfter <= sdkMaxRetryAfter {
		r.at(r.t+retryDelay(retries, retryAfter, r.rng), evRetry, c, nil)
		return
	}
	c.done = true
	if how == endRefused {
		r.res.Requests.Refused++
	} else {
		r.res.Requests.Failed++
	}
}

// served ends a call with its answer.
func (r *runner) served(rq *request) {
	c := rq.c
	if c.rq == rq {
		c.rq = nil
	}
	c.done = true
}
