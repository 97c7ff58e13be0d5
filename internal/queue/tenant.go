package queue

import "math"

// tenantKey names a tenant's share: counters are per priority (fairness is
// within a priority), so a tenant with requests in two classes has two.
type tenantKey struct {
	priority int
	name     string
}

// tenant is one tenant's share of one priority: its Virtual Token Counter
// and what it has waiting and running.
type tenant struct {
	key    tenantKey
	id     uint32  // its index in Core.byID, named by its grants' Cost
	weight float64 // of its latest request; > 0
	// counter is its virtual tokens: service charged ÷ weight, trued up by
	// Settle, raised by arrive's lift.
	counter  float64
	service  int64    // charged in total, after settles
	waiting  int      // its requests in the queue
	linked   int      // those in the heaps now: a dispatch unlinks the ones it passes over until it ends
	inflight int      // its granted requests not yet released
	groups   []*group // those holding its linked waiters
	lvl      *level   // its priority's
	acct     *account // its name's part of the windows; nil while shares are off
	held     bool     // set aside by the running dispatch at its share: out of the backlog
	idx      [2]int   // position in its level's backlog and in the idle heap; -1 when out
}

// Slots of tenant.idx.
const (
	inBacklog = 0
	inIdle    = 1
)

// level is one priority's tenants.
type level struct {
	backlog tenantHeap // tenants with linked waiters, least counter first
	// last is the tenant most recently granted here: its counter is the
	// lift's floor when no tenant is backlogged.
	last *tenant
}

// weightOf is a request's Weight as its tenant's share: positive and finite.
func weightOf(w float64) float64 {
	if !(w > 0) || math.IsInf(w, 1) {
		return 1
	}
	return w
}

// tenantFor returns tenant k, creating it (counter 0: arrive lifts it),
// with the weight of its latest request.
func (c *Core) tenantFor(k tenantKey, weight float64) *tenant {
	t := c.lookup(k)
	if t == nil {
		t = &tenant{key: k, lvl: c.lv(k.priority), idx: [2]int{-1, -1}}
		switch n := len(c.freeIDs); {
		case k == tenantKey{}: // id 0, the zero Cost's: Release(Cost{}) is the default tenant's
		case n > 0:
			t.id, c.freeIDs = c.freeIDs[n-1], c.freeIDs[:n-1]
		default:
			t.id = uint32(len(c.byID))
			c.byID = append(c.byID, nil)
		}
		c.byID[t.id] = t
		c.tenants[k] = t
		if c.shares {
			t.acct = c.acctFor(k.name)
			t.acct.refs++
		}
	}
	t.weight = weightOf(weight)
	c.hot = t
	return t
}

// lookup returns the tenant remembered as k, or nil. The one used last is
// kept aside: without tenants (or with one busy tenant) every grant and
// release is for it, and comparing a key costs less than hashing it.
func (c *Core) lookup(k tenantKey) *tenant {
	if c.hot != nil && c.hot.key == k {
		return c.hot
	}
	return c.tenants[k]
}

// lv returns priority p's level, creating it.
func (c *Core) lv(p int) *level {
	l := c.levels[p]
	if l == nil {
		l = &level{backlog: tenantHeap{kind: byCounter}}
		c.levels[p] = l
	}
	return l
}

// arrive lifts t as one of its requests arrives, when it has no other
// waiting: to at least the least counter of the tenants backlogged in its
// priority, or, with none backlogged, to that of the tenant granted last
// there (VTC's rule): a tenant that was idle cannot bank the service it did
// not ask for. The caller updates t afterwards.
func (c *Core) arrive(t *tenant) {
	if t.waiting > 0 {
		return
	}
	floor := t.counter
	switch l := t.lvl; {
	case l.backlog.len() > 0:
		floor = l.backlog.top().counter
	case l.last != nil:
		floor = l.last.counter
	}
	if floor > t.counter { // counters are finite: no NaN to mind, unlike max's
		t.counter = floor
	}
}

// charge counts one of t's requests granted: service added to its counter
// (÷ its weight) and one more in flight.
func (c *Core) charge(t *tenant, service int64) {
	t.counter += float64(service) / t.weight
	t.service += service
	t.inflight++
	t.lvl.last = t
	c.update(t)
}

// released counts one of tenant id's requests out of flight. A tenant in
// flight is never forgotten, so its id names it until its last Release.
func (c *Core) released(id uint32) {
	if int(id) >= len(c.byID) {
		return
	}
	if t := c.byID[id]; t != nil && t.inflight > 0 {
		t.inflight--
		c.update(t)
	}
}

// Settle corrects the counter of tenant at priority by the difference
// between the service its grant was charged (Grant.Service) and the real
// one, actual (negative counts as 0), divided by its weight: the charge was
// an estimate. Call it at most once per grant, before or after its Release.
// A tenant no longer remembered (forgotten while idle) is a no-op.
func (c *Core) Settle(tenant string, priority int, charged, actual int64) {
	t := c.lookup(tenantKey{priority: priority, name: tenant})
	if t == nil {
		return
	}
	d := max(actual, 0) - max(charged, 0)
	t.service += d
	t.counter += float64(d) / t.weight
	c.update(t)
}

// update puts t where its state now says, after any change to it: in its
// level's backlog while it has linked waiters, in the idle heap while it
// has neither waiter nor request in flight. Its counter or oldest waiter
// may have changed, so it is re-placed in whichever it is in. Then the idle
// tenants beyond MaxTenants are forgotten. O(log tenants).
//
// The idle heap is kept only once more tenants than MaxTenants have been
// remembered at once (evicting): until then none can need forgetting, and
// the grants of a queue without tenants pay nothing for it.
func (c *Core) update(t *tenant) {
	b := &t.lvl.backlog
	switch in, want := t.idx[inBacklog] >= 0, t.linked > 0 && !t.held; {
	case want && !in:
		b.push(t)
	case want:
		b.fix(t)
	case in:
		b.remove(t)
	}
	if !c.evicting {
		if len(c.tenants) > c.s.MaxTenants {
			c.startEvicting() // from every tenant's state, t's included
		}
		return
	}
	idle := t.waiting == 0 && t.inflight == 0
	switch in := t.idx[inIdle] >= 0; {
	case idle && !in:
		c.idle.push(t)
		c.evict()
	case idle:
		c.idle.fix(t)
	case in:
		c.idle.remove(t)
	}
}

// startEvicting builds the idle heap of every idle tenant, then forgets
// those beyond MaxTenants; from then on update keeps the heap.
func (c *Core) startEvicting() {
	c.evicting = true
	for _, t := range c.tenants {
		if t.waiting == 0 && t.inflight == 0 && t.idx[inIdle] < 0 {
			c.idle.push(t)
		}
	}
	c.evict()
}

// evict forgets idle tenants, least counter first, while more than
// MaxTenants are remembered. One whose counter is at most the least
// backlogged one loses nothing: the lift gives it that counter back.
func (c *Core) evict() {
	for c.idle.len() > c.s.MaxTenants {
		t := c.idle.top()
		c.idle.remove(t)
		delete(c.tenants, t.key)
		c.byID[t.id] = nil
		if t.id != 0 {
			c.freeIDs = append(c.freeIDs, t.id)
		}
		if c.hot == t {
			c.hot = nil
		}
		if a := t.acct; a != nil {
			a.refs--
			c.dropAcct(a)
		}
	}
}

// drainTenants empties every tenant's waiters (Drain).
func (c *Core) drainTenants() {
	for _, l := range c.levels {
		for len(l.backlog.items) > 0 {
			t := l.backlog.items[len(l.backlog.items)-1]
			t.waiting, t.linked, t.groups = 0, 0, nil
			c.update(t)
		}
	}
}

// oldest is the arrival (seq) of t's oldest linked waiter: the head of one
// of its groups' FIFO heaps. It breaks ties between counters; a pass over
// t's groups (one, mostly) is cheaper than a heap of all its waiters kept
// on every link and unlink.
func (t *tenant) oldest() uint64 {
	seq := t.groups[0].fifo.top().seq
	for _, g := range t.groups[1:] {
		seq = min(seq, g.fifo.top().seq)
	}
	return seq
}

// addGroup lists g among t's groups (link).
func (t *tenant) addGroup(g *group) {
	g.slot = len(t.groups)
	t.groups = append(t.groups, g)
}

// removeGroup takes g, emptied, out of t's groups (unlink).
func (t *tenant) removeGroup(g *group) {
	last := len(t.groups) - 1
	t.groups[g.slot] = t.groups[last]
	t.groups[g.slot].slot = g.slot
	t.groups[last] = nil
	t.groups = t.groups[:last]
	g.slot = -1
}
