package queue

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Queue is the admission queue for concurrent callers: a Core behind a mutex,
// with one buffered channel per waiter. Acquire blocks until a slot is
// granted or the caller's context ends; the queue owns no timer.
//
// Queue is safe for concurrent use and must not be copied. Create one with
// New.
type Queue struct {
	now func() time.Time

	// mu guards the fields below.
	mu      sync.Mutex
	core    *Core
	waiters map[uint64]chan result // by request ID; each gets one send
	nextID  uint64
	closed  error // set by Drain: Acquire fails with it
}

// result is what a waiter is sent: a slot, or the error that ended its wait.
type result struct {
	slot *Slot
	err  error
}

// New returns an empty Queue in FIFO order with no windows. The error names
// every invalid Settings field.
func New(s Settings) (*Queue, error) {
	c, err := NewCore(s)
	if err != nil {
		return nil, err
	}
	return &Queue{now: c.s.Now, core: c, waiters: make(map[uint64]chan result)}, nil
}

// Slot is a held place in an upstream's window; Acquire hands them out.
// Release it exactly once, when
// the request is over (after the response body is copied); a second Release
// is a no-op. Safe for concurrent use; must not be copied.
type Slot struct {
	q        *Queue
	upstream string
	cost     Cost // what the request holds, given back on Release
	// once has released and settled set once each: one word for the two,
	// so that a Slot stays 96 bytes.
	once atomic.Uint32
	// score is the grant's score (Grant.Score), NaN when it had none. A
	// float32 fills the padding after once (a Slot stays 96 bytes), and is
	// precise enough for a score reported to the gateway.
	score float32
	// tenant and priority name the counter the grant charged service;
	// Settle trues it up once (by name: an id may be reused once its
	// tenant is forgotten).
	tenant   string
	priority int
	service  int64
}

// Bits of Slot.once.
const (
	released = 1 << iota
	settled
)

// newSlot is the slot of grant g.
func (q *Queue) newSlot(g Grant) *Slot {
	score := float32(math.NaN())
	if g.Scored {
		score = float32(g.Score)
	}
	return &Slot{q: q, upstream: g.Upstream, cost: g.Cost, tenant: g.Tenant, priority: g.Priority, service: g.Service,
		score: score}
}

// Upstream returns the name of the window the slot belongs to.
func (s *Slot) Upstream() string { return s.upstream }

// Score returns the Scorer's score for the request on the slot's upstream
// when it was granted (Grant.Score, to float32 precision); ok is false when
// the queue had no Scorer then.
func (s *Slot) Score() (score float64, ok bool) {
	if s.score != s.score { // NaN
		return 0, false
	}
	return float64(s.score), true
}

// Release gives the slot back, which may start a waiter.
func (s *Slot) Release() {
	if s.once.Or(released)&released != 0 {
		return
	}
	s.q.release(s.upstream, s.cost)
}

// Settle corrects the slot's tenant's counter by what the request really
// cost, actual (in Request.Service's weighted tokens; negative counts as 0),
// against what its grant charged (Core.Settle). Only the first call counts;
// it may come before or after Release. A tenant forgotten meanwhile (idle
// beyond MaxTenants) is not corrected.
func (s *Slot) Settle(actual int64) {
	if s.once.Or(settled)&settled != 0 {
		return
	}
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	s.q.core.Settle(s.tenant, s.priority, s.service, actual)
}

// Acquire takes a slot for r (r.ID is ignored), at once if a window has room
// that no earlier waiter can use, else after waiting in the queue. When ctx
// ends first, the waiter is removed at once and ctx.Err() is returned; a
// slot granted at that same moment is released, never leaked. Errors also:
// ErrTooLarge, ErrFull, ErrTokensFull, and after Drain the error it was given.
// A ctx already done fails before anything is taken.
func (q *Queue) Acquire(ctx context.Context, r Request) (*Slot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slot, w, err := q.Enter(r)
	if err != nil || slot != nil {
		return slot, err
	}
	return w.Wait(ctx)
}

// Enter is Acquire in two steps, for a caller that sets up what ends its
// wait (its deadline's timer) only when it has to wait: a slot at once, as
// Acquire takes it, or the error that refuses r at once, or else r waits in
// the queue as w, and the caller must call w.Wait exactly once.
func (q *Queue) Enter(r Request) (slot *Slot, w Waiter, err error) {
	slot, id, ch, err := q.enqueue(q.now(), r)
	if err != nil || slot != nil {
		return slot, Waiter{}, err
	}
	return slot, Waiter{q: q, id: id, ch: ch}, nil
}

// Waiter is a request waiting in the queue since Enter.
type Waiter struct {
	q  *Queue
	id uint64
	ch chan result
}

// Wait blocks until the waiter is granted a slot or refused (a Drain,
// Dispatch finding no upstream it may use), or ctx ends: the waiter is
// then removed at once and ctx.Err() is returned; a slot granted at that
// same moment is released, never leaked.
func (w Waiter) Wait(ctx context.Context) (*Slot, error) { return w.q.wait(ctx, w.id, w.ch) }

// TryAcquire takes a slot for r at once when an upstream r may use has room
// that no waiter can use (see Core.Take), and never waits: nil when there is
// none, or after Drain. Like Acquire's, its grant charges r's tenant.
func (q *Queue) TryAcquire(r Request) *Slot {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed != nil {
		return nil
	}
	g, ok := q.core.take(q.now(), r)
	if !ok {
		return nil
	}
	return q.newSlot(g)
}

// enqueue admits r and returns either a slot, or the waiter's ID and channel.
func (q *Queue) enqueue(now time.Time, r Request) (*Slot, uint64, chan result, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed != nil {
		return nil, 0, nil, q.closed
	}
	q.nextID++
	r.ID = q.nextID
	g, granted, err := q.core.Enqueue(now, r)
	switch {
	case err != nil:
		return nil, 0, nil, err
	case granted:
		return q.newSlot(g), 0, nil, nil
	}
	ch := make(chan result, 1)
	q.waiters[r.ID] = ch
	return nil, r.ID, ch, nil
}

// wait blocks until waiter id is sent a result or ctx ends.
func (q *Queue) wait(ctx context.Context, id uint64, ch chan result) (*Slot, error) {
	select {
	case res := <-ch:
		return res.slot, res.err
	case <-ctx.Done():
	}
	now := q.now()
	q.mu.Lock()
	_, waiting := q.waiters[id]
	if waiting {
		delete(q.waiters, id)
		_, grants := q.core.Cancel(now, id)
		q.deliver(grants)
	}
	q.mu.Unlock()
	if !waiting {
		// A grant or Drain got there first and has already sent its result.
		if res := <-ch; res.slot != nil {
			res.slot.Release()
		}
	}
	return nil, ctx.Err()
}

// release gives back a slot on upstream and hands the freed room on.
func (q *Queue) release(upstream string, cost Cost) {
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.deliver(q.core.Release(now, upstream, cost))
}

// deliver sends each grant to its waiter. Must hold mu; the sends never
// block (each channel has room for its one result).
func (q *Queue) deliver(grants []Grant) {
	for _, g := range grants {
		ch := q.waiters[g.ID]
		delete(q.waiters, g.ID)
		if g.Err != nil {
			ch <- result{err: g.Err}
			continue
		}
		ch <- result{slot: q.newSlot(g)}
	}
}

// update runs change on the core under the lock, then dispatches.
func (q *Queue) update(change func(c *Core)) {
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	change(q.core)
	q.deliver(q.core.Dispatch(now))
}

// SetWindow sets the limit of an upstream's window (creating it, available)
// and starts waiters if it grew. See Core.SetWindow.
func (q *Queue) SetWindow(name string, limit int) {
	q.update(func(c *Core) { c.SetWindow(name, limit) })
}

// SetMemoryBudget bounds the memory of an upstream's in-flight requests and
// starts waiters if it grew. See Core.SetMemoryBudget.
func (q *Queue) SetMemoryBudget(name string, budget int64) {
	q.update(func(c *Core) { c.SetMemoryBudget(name, budget) })
}

// SetTokenLimit bounds the estimated tokens of an upstream's in-flight
// requests and starts waiters if it grew. See Core.SetTokenLimit.
func (q *Queue) SetTokenLimit(name string, limit int64) {
	q.update(func(c *Core) { c.SetTokenLimit(name, limit) })
}

// SetAvailability sets the function that decides, at every dispatch, whether
// an upstream can take new work. See Core.SetAvailability: it runs under the
// queue's lock, so it must only read state (a published snapshot, best
// without a lock) and never call back into the queue.
func (q *Queue) SetAvailability(f func(upstream string) Availability) {
	q.update(func(c *Core) { c.SetAvailability(f) })
}

// Dispatch looks at every upstream's availability again: waiters go to
// upstreams that became available by time alone (an error breaker whose
// open time ended, a recovered health check), and those that no upstream
// can take are refused. Callers run it after each health or pressure round.
func (q *Queue) Dispatch() { q.update(func(*Core) {}) }

// RemoveWindow stops dispatch to an upstream for good. See Core.RemoveWindow.
func (q *Queue) RemoveWindow(name string) {
	q.update(func(c *Core) { c.RemoveWindow(name) })
}

// setOrder sets the order of every window. See Core.SetOrder.
func (q *Queue) setOrder(o Order) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.core.SetOrder(o)
}

// SetWindowOrder sets the order of the waiters that may use one window (a
// pool's pods). See Core.SetWindowOrder.
func (q *Queue) SetWindowOrder(name string, o Order) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.core.SetWindowOrder(name, o)
}

// UpdateSettings applies new bounds and aging (a reload). Bounds apply to new
// arrivals; nobody already waiting is dropped. s.Now is ignored: the clock is
// fixed by New.
func (q *Queue) UpdateSettings(s Settings) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.core.updateSettings(s)
}

// Drain fails every waiter with err (nil means ErrClosed) and closes the
// queue: later Acquire calls fail with err at once. Slots already held stay
// valid and are released as usual. Used at shutdown.
func (q *Queue) Drain(err error) {
	if err == nil {
		err = ErrClosed
	}
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = err
	for _, id := range q.core.Drain(now) {
		q.waiters[id] <- result{err: err}
		delete(q.waiters, id)
	}
}

// InFlight returns how many slots (sequences) the window named name holds
// (Core.InFlight).
func (q *Queue) InFlight(name string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.core.InFlight(name)
}

// Stats returns a snapshot of the queue.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.core.Stats()
}

// SetScorer sets the Scorer that chooses between upstreams with room (see
// Core.SetScorer); nil restores the most free window. It runs under the
// queue's lock, so it must never call back into the queue.
func (q *Queue) SetScorer(s Scorer) {
	q.update(func(c *Core) { c.SetScorer(s) })
}
