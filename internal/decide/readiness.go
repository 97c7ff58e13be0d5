package decide

// A shutdown has two steps (DESIGN §7), and the core holds both, so that
// either front and the admin listener read one state: StartDrain turns
// readiness off while traffic still flows for the drain delay (load
// balancers notice and stop sending), then Drain refuses new work.

// StartDrain is a shutdown's first step: from now on the core is unready
// ("draining": /readyz answers 503, the picker's readiness NOT_SERVING)
// while new requests are still admitted. It cannot be undone.
func (c *Core) StartDrain() { c.draining.Store(true) }

// Drain is a shutdown's second step, after the drain delay: new requests
// are refused with 503 draining; those already admitted finish. It implies
// StartDrain and cannot be undone.
func (c *Core) Drain() {
	c.draining.Store(true)
	c.refusing.Store(true)
}

// Draining reports whether a shutdown has begun (StartDrain or Drain).
func (c *Core) Draining() bool { return c.draining.Load() }

// Unready says why the core is not ready for new work; "" when it is. It is
// readiness for both fronts (/readyz, the picker's gRPC health) and the
// admin listener, checked in this order: no shutdown has begun (Draining),
// some pod can take work and not every one is critical (outside observe
// mode), with model discovery some pod's model list is known, and
// Options.Ready's condition holds.
func (c *Core) Unready() string {
	switch {
	case c.Draining():
		return "draining"
	case c.reg.AnyAvailable() && !c.reg.ModelsKnown():
		return "no upstream's model list is known yet (discover_models)"
	case !c.reg.AnyAvailable(), c.reg.AllCritical() && !c.reg.Observe():
		return "no upstream can take work"
	}
	if c.ready != nil {
		if err := c.ready(); err != nil {
			return err.Error()
		}
	}
	return ""
}
