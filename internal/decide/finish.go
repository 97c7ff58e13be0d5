package decide

import "github.com/gatekeeper-dev/gatekeeper/internal/pods"

// Cut says why a pod's response did not reach its end, as far as the
// front can tell.
type Cut uint8

const (
	// CutNone: the response reached its end (the proxy: it was copied
	// whole to the client; the picker: its end of stream came).
	CutNone Cut = iota
	// CutUnknown: it ended early and the front cannot tell why (the
	// picker: a reset, which the client or the pod may have caused).
	CutUnknown
	// CutClient: the client left.
	CutClient
	// CutTimeout: the client took no bytes of the answer for send_timeout.
	CutTimeout
	// CutUpstream: the pod failed it (a transport error, a stream that
	// broke mid-copy).
	CutUpstream
)

// End is how a request's exchange with its pod ended, as the front saw it.
type End struct {
	// Status is the pod's status; 0 when no response headers came.
	Status int
	// Cut says why the response did not reach its end; CutNone when it did.
	Cut Cut
	// StreamError says a 200 event stream carried an error event (vLLM
	// sends one when generation fails midway).
	StreamError bool
	// Usage is what the response reported it used.
	Usage Usage
	// Retry says the request goes on to another pod (the proxy's one retry
	// of a request this pod refused or never received): this pod records
	// no outcome.
	Retry bool
}

// Ending is what Finish decided; the front records it.
type Ending struct {
	// Outcome is the request's one outcome; "" for a request that goes on
	// to another pod.
	Outcome Outcome
	// result is what the pod's error breaker heard.
	result pods.Result
	// Status is the status the request ended with, for the front's log and
	// span: the pod's, StatusClientClosed for a client gone, or
	// StatusBadGateway for a pod that failed before it answered.
	Status int
	// PodRefused says the pod refused the request itself (its own 503 or
	// 429); its outcome is upstream_overloaded, its reason
	// ReasonUpstreamOverloaded.
	PodRefused bool
}

// Finish decides the end of an admitted request from what its front saw:
// it reports the pod's result to its error breaker (adm.Done), tells
// Options.OnPodRefused of a pod's own refusal, and trues up or refunds what
// the request was charged. It is the one table both fronts end a request
// by:
//
//	the request goes on to another pod   no outcome; Excluded (the pod's refusal) or Failure (never reached); nothing charged moves but the slot's service
//	the pod's own 503 or 429             upstream_overloaded, Excluded, refunded
//	a 200 stream with an error event     stream_error, Failure
//	5xx                                  upstream_error, Failure, refunded
//	any other answer, whole              served, Success
//	the client took nothing in time      client_timeout, Excluded
//	the client left (or the front cannot tell why it ended)  client_closed, Excluded
//	no answer: the pod failed            upstream_error, Failure
//
// An answer counts as the pod's (the first four rows) once its headers
// came and it ended whole, or early for a reason the front cannot tell.
// Call Finish exactly once, then release adm.Slot.
func (c *Core) Finish(req *Request, adm *Admitted, e End) Ending {
	refused := e.Status == statusServiceUnavailable || e.Status == statusTooManyRequests
	if refused && c.podRefused != nil {
		c.podRefused(adm.Pod.Name)
	}
	end := ending(e, refused)
	if end.PodRefused {
		c.poolRefused(req, &Refusal{Reason: ReasonUpstreamOverloaded})
	}
	if e.Retry {
		c.settleSlot(req, adm.Slot, Usage{none: true}) // this pod did no work; the quota charge goes on
	} else {
		// The pod's own refusal and a 5xx did no work for it and give its
		// charge back. Otherwise (a client gone, a stream cut) the pod may
		// have worked for it: without a usage the estimate stands.
		used := e.Usage
		if answered(e) && (refused || !e.StreamError && e.Status >= 500) {
			used = Usage{none: true}
		}
		c.settle(req, adm.Slot, used)
	}
	adm.Done(end.result)
	return end
}

// answered reports whether e's answer counts as the pod's.
func answered(e End) bool { return e.Status != 0 && (e.Cut == CutNone || e.Cut == CutUnknown) }

// ending is Finish's table.
func ending(e End, refused bool) Ending {
	switch {
	case e.Retry && refused:
		return Ending{result: pods.Excluded, Status: e.Status, PodRefused: true} // overload, not failure
	case e.Retry:
		return Ending{result: pods.Failure} // it could not be reached: a real failure
	case answered(e) && refused:
		return Ending{Outcome: OutcomeUpstreamOverloaded, result: pods.Excluded, Status: e.Status, PodRefused: true}
	case answered(e) && e.StreamError:
		return Ending{Outcome: OutcomeStreamError, result: pods.Failure, Status: e.Status} // as a 500 would count
	case answered(e) && e.Status >= 500:
		return Ending{Outcome: OutcomeUpstreamError, result: pods.Failure, Status: e.Status}
	case e.Status != 0 && e.Cut == CutNone:
		return Ending{Outcome: OutcomeServed, result: pods.Success, Status: e.Status}
	case e.Cut == CutTimeout: // not the pod's fault
		return Ending{Outcome: OutcomeClientTimeout, result: pods.Excluded, Status: e.Status}
	case e.Cut == CutClient, e.Cut == CutUnknown:
		return Ending{Outcome: OutcomeClientClosed, result: pods.Excluded, Status: StatusClientClosed}
	}
	return Ending{Outcome: OutcomeUpstreamError, result: pods.Failure, Status: statusBadGateway}
}

// Retry takes a slot now on another pod with room, for a request a pod
// refused before any byte reached the client (or could not be reached); nil
// when none has room. It never waits: inference requests are retried once.
func (c *Core) Retry(req *Request, exclude []string) (*Admitted, bool) {
	slot := c.admission.TryAcquire(req.need(), exclude)
	if slot == nil {
		return nil, false
	}
	m, ok := c.reg.Get(slot.Upstream())
	if !ok {
		slot.Release()
		return nil, false
	}
	done, ok := allow(m)
	if !ok {
		slot.Release()
		return nil, false
	}
	return &Admitted{Pod: m, Slot: slot, Done: done}, true
}

// allow asks m's error breaker to admit a request; without one every
// request passes and its result is dropped.
func allow(m *pods.Member) (done func(pods.Result), ok bool) {
	if m.Gate == nil {
		return func(pods.Result) {}, true
	}
	d, err := m.Gate.Allow()
	return d, err == nil
}
