package decide

// PoolCounter hears, per model, what the core decided of its requests, for
// the scaling signal's model pools (docs/scaling.md; scale.Tally satisfies
// it): each request routed to a model, each refused for a reason (enforced
// refusals only: observe mode refuses none), and each waiting for a slot.
// The core hands it the body's model (or the one the pods serve); the
// counter keeps only the models the pods list, so nothing it holds grows
// with the names clients send. It must not block.
type PoolCounter interface {
	// Arrived: a request for model was routed to the pods that serve it.
	Arrived(model string)
	// Refused: a request for model was refused for reason: by the core,
	// or by its pod itself (upstream_overloaded).
	Refused(model, reason string)
	// Waiting adds delta to the requests for model waiting for a slot: +1
	// when one starts to wait, -1 when it stops.
	Waiting(model string, delta int)
}

// poolArrived counts req's arrival in its model's pool.
func (c *Core) poolArrived(req *Request) {
	if c.pools != nil && req.Model != "" {
		c.pools.Arrived(req.Model)
	}
}

// poolRefused counts req's refusal in its model's pool; a nil rf is none.
func (c *Core) poolRefused(req *Request, rf *Refusal) {
	if c.pools != nil && rf != nil && req.Model != "" {
		c.pools.Refused(req.Model, string(rf.Reason))
	}
}

// poolWaiting adds delta to the requests of req's model waiting for a slot.
func (c *Core) poolWaiting(req *Request, delta int) {
	if c.pools != nil && req.Model != "" {
		c.pools.Waiting(req.Model, delta)
	}
}
