package queue

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// DeadlineError is ErrDeadline with the wait the queue predicted: a waiter
// whose deadline comes before it could start, refused at once instead of
// waiting until it is of no use to its client.
type DeadlineError struct {
	// Wait is the predicted time until the request could start: the slots
	// ahead of it (and its own) over the rate its windows give slots back.
	Wait time.Duration
}

func (e *DeadlineError) Error() string {
	return fmt.Sprintf("%v: predicted wait %v", ErrDeadline, e.Wait.Round(time.Millisecond))
}

// Unwrap makes errors.Is(err, ErrDeadline) hold.
func (e *DeadlineError) Unwrap() error { return ErrDeadline }

// RetryAfter is when the work ahead of the request will have drained at the
// rate measured now.
func (e *DeadlineError) RetryAfter() time.Duration { return e.Wait }

// rateEvents is how many releases a window's service rate remembers; the
// rate is measured over their span (at least minRateSpan) up to now.
const (
	rateEvents    = 64
	minRateEvents = 8
	minRateSpan   = time.Second
)

// serviceRate measures how fast a window gives slots back: the slots of its
// last rateEvents releases over the time since the oldest of them. The zero
// value has measured nothing.
type serviceRate struct {
	at    [rateEvents]time.Time
	slots [rateEvents]int32
	n     int // events held, up to rateEvents
	next  int // where the next event goes
	sum   int64
}

func (s *serviceRate) add(now time.Time, slots int) {
	if s.n == rateEvents {
		s.sum -= int64(s.slots[s.next])
	} else {
		s.n++
	}
	s.at[s.next], s.slots[s.next] = now, int32(min(slots, math.MaxInt32))
	s.sum += int64(slots)
	s.next = (s.next + 1) % rateEvents
}

// perSecond is the measured rate at now in slots per second; 0 before
// minRateEvents releases.
func (s *serviceRate) perSecond(now time.Time) float64 {
	if s.n < minRateEvents {
		return 0
	}
	oldest := s.at[(s.next-s.n+rateEvents)%rateEvents]
	span := max(now.Sub(oldest), minRateSpan)
	return float64(s.sum) / span.Seconds()
}

// predictWait is how long a request that would wait now (it excludes
// exclude, takes seqs slots, has tokens, deadline and priority; it is of
// tenant own, of weight w) is predicted to wait before it starts: the slots
// of the waiters that go before it on windows it may use, its own, and what
// runs above a cut window, over the rate those windows give slots back.
// ok is false when no window it may use has measured a rate: nothing is
// predicted then.
//
// Those that go before it: every waiter of a higher priority; of its own
// tenant, those goesBefore says; and of each other tenant v backlogged in
// its priority, the slots VTC serves v while it serves the newcomer's n
// (its tenant's slots ahead and its own), n × w_v ÷ w, at most what v has
// waiting. It is approximate (counters are not consulted: a tenant far
// behind is served first for a while), and with one tenant it is exact as
// before tenants.
func (c *Core) predictWait(now time.Time, it *item, own tenantKey, w float64) (wait time.Duration, ok bool) {
	var rate float64
	over := 0
	for _, win := range c.windows {
		if c.state(win) == Down || slices.Contains(it.exclude, win.name) {
			continue
		}
		rate += win.rate.perSecond(now)
		over += max(win.inflight-win.limit, 0)
	}
	if rate <= 0 {
		return 0, false
	}
	order := c.orderOf(it.exclude)
	higher, mine := 0, 0
	for _, g := range c.groups {
		if !c.shareWindow(g.exclude, it.exclude) {
			continue // its waiters compete for no window the newcomer may use
		}
		switch k := g.key.tenant; {
		case k.priority > it.priority:
			for _, o := range g.fifo.items {
				higher += o.seqs
			}
		case k == own:
			for _, o := range g.fifo.items {
				if c.goesBefore(now, o, it, order) {
					mine += o.seqs
				}
			}
		case k.priority == it.priority:
			for _, o := range g.fifo.items {
				c.others[g.tenant] += o.seqs
			}
		}
	}
	ahead := higher + mine
	if len(c.others) > 0 {
		n := float64(mine + it.seqs)
		for v, slots := range c.others {
			ahead += int(min(float64(slots), math.Ceil(n*v.weight/w))) // in float: a huge weight cannot overflow
		}
		clear(c.others)
	}
	secs := float64(ahead+it.seqs+over) / rate
	return time.Duration(min(secs, float64(365*24*time.Hour/time.Second)) * float64(time.Second)), true
}

// shareWindow reports whether waiters that exclude a and waiters that
// exclude b may both use some window: they compete. It depends on the
// exclude lists alone, so predictWait asks it once per group.
func (c *Core) shareWindow(a, b []string) bool {
	for _, w := range c.windows {
		if !slices.Contains(a, w.name) && !slices.Contains(b, w.name) {
			return true
		}
	}
	return false
}

// goesBefore reports whether waiter o leaves before newcomer it (which
// arrived after every waiter) in order at now.
func (c *Core) goesBefore(now time.Time, o, it *item, order Order) bool {
	if o.priority != it.priority {
		return o.priority > it.priority
	}
	switch order {
	case ShortestFirst:
		return o.tokens <= it.tokens || now.Sub(o.arrival) >= c.s.StarvationAfter
	case EarliestDeadline:
		return !earlier(it.deadline, o.deadline) // ties go to the earlier arrival
	}
	return true
}
