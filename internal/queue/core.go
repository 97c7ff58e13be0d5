package queue

import (
	"cmp"
	"slices"
	"time"
)

// Core is the queue's logic without concurrency: windows, waiters, order,
// bounds and dispatch. It starts no goroutine and owns no timer; methods that
// depend on time take now. Deadlines are the caller's: it calls Cancel.
//
// Core is not safe for concurrent use (Queue wraps it for that). Create one
// with NewCore.
//
// Every method that can free room (Release, Dispatch) returns the grants it
// made. Window setters (SetWindow, RemoveWindow) only record the change, and
// availability (SetAvailability) is read as it is at each call: call
// Dispatch after a change, before the next Enqueue, or a newcomer may take
// room that an earlier waiter could have used.
type Core struct {
	s       Settings
	order   Order
	windows []*window // sorted by name
	avail   func(upstream string) Availability
	scorer  Scorer // nil: the window with the most room
	waiting map[uint64]*item
	fifo    heap               // every waiter, by arrival
	groups  map[groupID]*group // the same waiters, by tenant and the windows they may use
	tokens  int64
	seq     uint64
	last    time.Time // latest arrival; a clock that steps back stands still
	// tenants holds every tenant remembered: those with waiters or requests
	// in flight, and at most MaxTenants idle ones (idle, least counter on
	// top, says which to forget). levels holds each priority's tenants.
	tenants map[tenantKey]*tenant
	byID    []*tenant // by tenant.id; nil where forgotten
	freeIDs []uint32  // ids of forgotten tenants, to reuse
	levels  map[int]*level
	idle    tenantHeap // kept once evicting (update)
	hot     *tenant    // the tenant looked up last (lookup); nil once forgotten
	// evicting is set once more tenants than MaxTenants were remembered.
	evicting bool
	others   map[*tenant]int // predictWait's scratch: other tenants' slots ahead
	// shares is set while Settings guarantee or cap a tenant's part of the
	// windows (share.go): accts holds each tenant name's account, minAccts
	// those with a reservation, held the tenants a dispatch set aside at
	// their cap (scratch).
	shares   bool
	accts    map[string]*account
	minAccts []*account
	held     []*tenant
}

// NewCore returns an empty Core in FIFO order with no windows. The error
// names every invalid Settings field.
func NewCore(s Settings) (*Core, error) {
	s, err := s.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Core{
		s:       s,
		waiting: make(map[uint64]*item),
		fifo:    heap{kind: byArrival},
		groups:  make(map[groupID]*group),
		tenants: make(map[tenantKey]*tenant),
		byID:    []*tenant{nil}, // id 0 is the default tenant's ("" at priority 0)
		levels:  make(map[int]*level),
		idle:    tenantHeap{kind: idleByCounter},
		others:  make(map[*tenant]int),
	}
	c.applyShares()
	return c, nil
}

// updateSettings applies new bounds and aging to new arrivals and later
// dispatches; nobody already waiting is dropped, even above the new bounds.
func (c *Core) updateSettings(s Settings) error {
	s, err := s.withDefaults()
	if err != nil {
		return err
	}
	c.s = s
	c.applyShares()
	if !c.evicting && len(c.tenants) > s.MaxTenants {
		c.startEvicting()
	}
	c.evict()
	return nil
}

// SetOrder sets the order of every window, and of windows created later.
// Every order indexes every waiter all the time, so switching loses or
// duplicates no one.
func (c *Core) SetOrder(o Order) {
	c.order = o
	for _, w := range c.windows {
		w.order = o
	}
}

// SetWindowOrder sets one window's order: the waiters that may use a window
// in ShortestFirst are served shortest first, the others by arrival, so a
// pool of pods under pressure reorders only its own queue. Unknown names
// are ignored.
func (c *Core) SetWindowOrder(name string, o Order) {
	if w, _ := c.find(name); w != nil {
		w.order = o
	}
}

// Len returns how many requests wait.
func (c *Core) Len() int { return c.fifo.len() }

// Enqueue admits r at now. When a window has room that no waiter can use, it
// grants r a slot at once (granted is true, g names the upstream). Otherwise r
// waits (granted is false, err nil) until Release or Dispatch grants it or the
// caller cancels it. Errors: ErrTooLarge, ErrFull, ErrTokensFull,
// ErrDuplicateID, ErrUnavailable when every upstream r may use is Down,
// ErrNoMemory, and a *DeadlineError (ErrDeadline) when r could not start
// before its Deadline; r is then neither granted nor queued.
func (c *Core) Enqueue(now time.Time, r Request) (g Grant, granted bool, err error) {
	tokens := max(r.Tokens, 0)
	switch {
	case tokens > c.s.MaxTokens:
		return Grant{}, false, ErrTooLarge
	case c.waiting[r.ID] != nil:
		return Grant{}, false, ErrDuplicateID
	}
	// Every waiter is blocked after each dispatch (no window with room it may
	// use, or one it reserved for its memory), so taking room here overtakes
	// no one who could have used it.
	cost := r.cost()
	if w, score := c.choose(r.Exclude, r.Prefix, cost, c.lookupAcct(r.Tenant)); w != nil {
		c.grantNow(now, &g, w, &r, cost, score)
		return g, true, nil
	}
	switch {
	case len(c.windows) > 0 && !c.reachable(r.Exclude):
		return Grant{}, false, ErrUnavailable
	case len(c.windows) > 0 && !c.canFit(r.Exclude, cost.Memory):
		return Grant{}, false, ErrNoMemory
	case c.fifo.len() >= c.s.MaxLength:
		return Grant{}, false, ErrFull
	case c.tokens+tokens > c.s.MaxTokens:
		return Grant{}, false, ErrTokensFull
	}
	if now.Before(c.last) {
		now = c.last
	}
	it := &item{id: r.ID, priority: r.Priority, tokens: tokens, memory: cost.Memory, seqs: cost.Seqs, arrival: now,
		deadline: r.Deadline, exclude: r.Exclude, prefix: r.Prefix, service: max(r.Service, 0)}
	if !r.Deadline.IsZero() {
		wait, ok := c.predictWait(now, it, tenantKey{priority: r.Priority, name: r.Tenant}, weightOf(r.Weight))
		if !r.Deadline.After(now) || ok && now.Add(wait).After(r.Deadline) {
			return Grant{}, false, &DeadlineError{Wait: wait}
		}
	}
	c.last = now
	c.seq++
	t := c.tenantFor(tenantKey{priority: r.Priority, name: r.Tenant}, r.Weight)
	c.arrive(t)
	t.waiting++
	it.seq, it.tenant = c.seq, t
	it.group = c.groupFor(r.Exclude, t)
	c.waiting[r.ID] = it
	c.link(it)
	c.reserve(it)
	c.tokens += tokens
	return Grant{}, false, nil
}

// grantNow gives r a slot on w at once (Enqueue, Take), written to g (in
// place: a Grant is 15 words): its tenant arrives (lifted if it had no
// waiter) and is charged.
func (c *Core) grantNow(now time.Time, g *Grant, w *window, r *Request, cost Cost, score float64) {
	w.take(now, cost)
	t := c.tenantFor(tenantKey{priority: r.Priority, name: r.Tenant}, r.Weight)
	cost.tenant = t.id
	if t.acct != nil {
		cost.tenant |= counted
		w.use(t.acct, cost.slots())
	}
	c.arrive(t)
	service := max(r.Service, 0)
	c.charge(t, service)
	c.chose(w, r.Prefix)
	*g = Grant{ID: r.ID, Upstream: w.name, Cost: cost, Tenant: r.Tenant, Priority: r.Priority, Service: service,
		Score: score, Scored: c.scorer != nil}
}

// take grants r a slot at once when a window it may use has room that no
// waiter can use, as Enqueue would, and never queues it: granted false means
// there is no such room now. It is for a retry that must not wait (a pod
// refused the request; another may take it now or not at all). A grant
// charges r's tenant as Enqueue's do.
func (c *Core) take(now time.Time, r Request) (g Grant, granted bool) {
	cost := r.cost()
	if w, score := c.choose(r.Exclude, r.Prefix, cost, c.lookupAcct(r.Tenant)); w != nil {
		c.grantNow(now, &g, w, &r, cost, score)
		return g, true
	}
	return Grant{}, false
}

// Release gives back the slots on upstream and the cost its grant held
// (Grant.Cost), and returns the grants that the freed room allowed. An
// unknown upstream or one with nothing in flight is a no-op (nil), but for
// the count of its tenant's requests in flight, which falls whatever the
// window.
func (c *Core) Release(now time.Time, upstream string, cost Cost) []Grant {
	var a *account
	id := cost.tenant &^ counted
	if c.shares && cost.tenant&counted != 0 && int(id) < len(c.byID) && c.byID[id] != nil {
		a = c.byID[id].acct
	}
	c.released(id)
	w, i := c.find(upstream)
	if w == nil || w.inflight == 0 {
		return nil
	}
	w.give(now, cost)
	if a != nil {
		w.use(a, -cost.slots())
		c.dropAcct(a)
	}
	if w.removed && w.inflight == 0 {
		c.windows = slices.Delete(c.windows, i, i+1)
		return nil
	}
	return c.Dispatch(now)
}

// Cancel removes waiter id at once (a deadline or a client that left),
// reports whether it was waiting, and returns the grants its leaving
// allowed: a waiter that reserved a window (its slots, memory or tokens did
// not fit what was left; see grant) held back those behind it there, and
// they may start now.
func (c *Core) Cancel(now time.Time, id uint64) (waiting bool, grants []Grant) {
	it := c.waiting[id]
	if it == nil {
		return false, nil
	}
	c.unlink(it)
	c.forget(it)
	if slices.ContainsFunc(c.windows, func(w *window) bool { return w.reserved }) {
		grants = c.Dispatch(now)
	}
	return true, grants
}

// Dispatch grants slots to waiters, in order, while windows have room, and
// returns the grants. A waiter that cannot use any window with room (it
// excludes them all) is passed over and keeps its place. Then, while some
// window is Down, every waiter whose usable windows are all Down leaves
// refused (a Grant with Err ErrUnavailable): nothing it may use will come
// back by itself before its deadline is worth waiting for.
func (c *Core) Dispatch(now time.Time) []Grant {
	grants := c.grant(now)
	if c.fifo.len() == 0 || !c.anyDown() {
		return grants
	}
	var refused []*item
	for _, it := range c.waiting {
		if !c.reachable(it.exclude) {
			refused = append(refused, it)
		}
	}
	slices.SortFunc(refused, func(a, b *item) int { return cmp.Compare(a.seq, b.seq) })
	for _, it := range refused {
		c.unlink(it)
		c.forget(it)
		grants = append(grants, Grant{ID: it.id, Err: ErrUnavailable})
	}
	return grants
}

// grant hands room to waiters in order; see Dispatch. A waiter that a window
// has room for but whose cost does not fit its memory budget or token limit
// now reserves that window until the next dispatch: nobody behind it, and no
// newcomer, overtakes it there, so a large request starts as soon as enough
// is given back instead of being passed over by every small one.
//
// A tenant whose next waiter only its share keeps out (at its cap, or the
// room left is reserved for others' min shares) is set aside whole until
// the dispatch ends, in O(log tenants): the tenants after it go first, and
// its waiters reserve nothing.
func (c *Core) grant(now time.Time) []Grant {
	var grants []Grant
	var passed []*item
	for _, w := range c.windows {
		w.reserved = false
	}
	for c.fifo.len() > 0 && c.anyRoom() {
		it := c.next(now)
		if it == nil {
			break // every tenant with waiters is set aside at its share
		}
		if c.shares && c.shareBlocked(it) {
			t := it.tenant
			t.held = true
			c.update(t)
			c.held = append(c.held, t)
			continue
		}
		c.unlink(it)
		w, score := c.choose(it.exclude, it.prefix, it.cost(), it.tenant.acct)
		if w == nil {
			passed = append(passed, it)
			c.reserve(it)
			continue
		}
		w.take(now, it.cost())
		w.use(it.tenant.acct, it.cost().slots())
		c.charge(it.tenant, it.service) // before forget: in flight, never idle in between
		c.chose(w, it.prefix)
		c.forget(it)
		grants = append(grants, Grant{ID: it.id, Upstream: w.name, Cost: it.cost(), Tenant: it.tenant.key.name,
			Priority: it.priority, Service: it.service, Score: score, Scored: c.scorer != nil})
	}
	for _, it := range passed {
		c.link(it) // same seq: the same place as before
	}
	for i, t := range c.held {
		t.held = false
		c.update(t)
		c.held[i] = nil
	}
	c.held = c.held[:0]
	return grants
}

// Drain removes every waiter and returns their IDs, oldest first. Windows and
// held slots are untouched.
func (c *Core) Drain(_ time.Time) []uint64 {
	if c.fifo.len() == 0 {
		return nil
	}
	ids := make([]uint64, 0, c.fifo.len())
	for c.fifo.len() > 0 {
		it := c.fifo.top()
		c.fifo.remove(it)
		ids = append(ids, it.id)
	}
	clear(c.groups)
	clear(c.waiting)
	c.fifo.reset()
	c.tokens = 0
	c.drainTenants()
	return ids
}

// link puts it in every heap, its group back in the index (and its
// tenant's list) if it left, and its tenant in its level's backlog.
func (c *Core) link(it *item) {
	if g := c.groups[it.group.key]; g == nil {
		c.groups[it.group.key] = it.group
		it.tenant.addGroup(it.group)
	} else {
		it.group = g
	}
	c.fifo.push(it)
	it.group.fifo.push(it)
	it.group.size.push(it)
	it.group.deadline.push(it)
	it.tenant.linked++
	c.update(it.tenant)
}

// unlink takes it out of every heap, and drops its group once empty.
func (c *Core) unlink(it *item) {
	c.fifo.remove(it)
	it.group.fifo.remove(it)
	it.group.size.remove(it)
	it.group.deadline.remove(it)
	if it.group.fifo.len() == 0 {
		delete(c.groups, it.group.key)
		it.tenant.removeGroup(it.group)
	}
	it.tenant.linked--
	c.update(it.tenant)
}

// forget drops it from the index, the token count and its tenant's waiters
// once it has left.
func (c *Core) forget(it *item) {
	delete(c.waiting, it.id)
	c.tokens -= it.tokens
	it.tenant.waiting--
	c.update(it.tenant)
}
