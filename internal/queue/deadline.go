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
	// ahead of it (and its own) over the rate its windows give slots back,
	// or, for a tenant at its max share, its tenant's excess over the rate
	// its own slots end at, whichever is longer (predictWait).
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
// rate is measured over their span (at least minRateSpan) up to now, and
// scaled to what the window holds only from scaleFrom times what it held
// meanwhile (perSecond).
const (
	rateEvents    = 64
	minRateEvents = 8
	minRateSpan   = time.Second
	scaleFrom     = 2
)

// serviceRate measures how fast a window gives slots back: the slots of its
// last rateEvents releases over the time since the oldest of them, and the
// slots it held meanwhile (its occupancy's integral, window.area). The zero
// value has measured nothing.
type serviceRate struct {
	at    [rateEvents]time.Time
	held  [rateEvents]float64 // the window's slot-seconds held up to each release
	slots [rateEvents]int32
	n     int // events held, up to rateEvents
	next  int // where the next event goes
	sum   int64
}

// add records a release of slots at now, when the window had held held
// slot-seconds in all.
func (s *serviceRate) add(now time.Time, held float64, slots int) {
	if s.n == rateEvents {
		s.sum -= int64(s.slots[s.next])
	} else {
		s.n++
	}
	s.at[s.next], s.held[s.next], s.slots[s.next] = now, held, int32(min(slots, math.MaxInt32))
	s.sum += int64(slots)
	s.next = (s.next + 1) % rateEvents
}

// perSecond is the rate in slots per second at which the window gives
// slots back while it holds occupancy of them, at now, when it has held
// held slot-seconds in all; 0 before minRateEvents releases.
//
// It is the measured rate, scaled up by occupancy over the mean it held
// while it was measured when that is scaleFrom times as much or more: by
// Little's law the same requests come back that much faster when that many
// more run. Unscaled, a window that had room gave slots back as fast as
// requests arrived, not as fast as its pod served: after a quiet spell that
// rate predicted a burst's waits many times too long and refused requests
// the pod would have started in time (interop's TestUvicornPod;
// TestCoreDeadlines, "a burst after a quiet spell"). Below scaleFrom the
// window holds about what it held, and the rate is taken as measured:
// scaled by smaller ratios too, it moved the predictions on a saturated
// pod (sim/replay's tables, its fairness test past VTC's bound). It is
// never scaled down: a window that holds less than it did (a cut) is
// predicted as it was measured.
func (s *serviceRate) perSecond(now time.Time, held float64, occupancy int) float64 {
	if s.n < minRateEvents {
		return 0
	}
	oldest := (s.next - s.n + rateEvents) % rateEvents
	span := now.Sub(s.at[oldest])
	rate := float64(s.sum) / max(span, minRateSpan).Seconds()
	if span > 0 {
		if mean := (held - s.held[oldest]) / span.Seconds(); mean > 0 && float64(occupancy) >= scaleFrom*mean {
			rate *= float64(occupancy) / mean
		}
	}
	return rate
}

// accrue adds what w held since it last accrued to its slot-seconds, up to
// now: take and give call it before they change what it holds.
func (w *window) accrue(now time.Time) {
	w.area = w.heldUntil(now)
	if now.After(w.areaAt) {
		w.areaAt = now
	}
}

// heldUntil is the slot-seconds w has held in all, up to now.
func (w *window) heldUntil(now time.Time) float64 {
	if w.areaAt.IsZero() || !now.After(w.areaAt) {
		return w.area
	}
	return w.area + float64(w.inflight)*now.Sub(w.areaAt).Seconds()
}

// rateAt is w's service rate at now while it holds what it holds (at most
// its limit).
func (w *window) rateAt(now time.Time) float64 {
	return w.rate.perSecond(now, w.heldUntil(now), min(w.inflight, w.limit))
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
//
// With shares (share.go) its tenant's account changes that: slots kept for
// it below its min share go to nobody else, so while they cover its
// tenant's waiters ahead and itself only those are ahead (guaranteedFor);
// and a tenant at its max share starts only as its own slots end, so the
// wait is at least its tenant's excess over the rate its own slots end at
// (capWait).
func (c *Core) predictWait(now time.Time, it *item, own tenantKey, w float64) (wait time.Duration, ok bool) {
	var rate float64
	over := 0
	for _, win := range c.windows {
		if c.usable(win, it.exclude) {
			rate += win.rateAt(now)
			over += max(win.inflight-win.limit, 0)
		}
	}
	if rate <= 0 {
		return 0, false
	}
	ahead, acctAhead := c.slotsAhead(now, it, own, w)
	a := c.lookupAcct(own.name)
	if c.guaranteedFor(a, it, acctAhead) {
		ahead = acctAhead
	}
	secs := float64(ahead+it.seqs+over) / rate
	if capSecs, ok := c.capWait(now, a, it, acctAhead); ok {
		secs = max(secs, capSecs)
	}
	// To the microsecond: the rates are floats' quotients.
	return time.Duration(min(secs, float64(365*24*time.Hour/time.Second)) * float64(time.Second)).Round(time.Microsecond), true
}

// usable reports whether a waiter that excludes exclude may use win.
func (c *Core) usable(win *window, exclude []string) bool {
	return c.state(win) != Down && !slices.Contains(exclude, win.name)
}

// slotsAhead counts the slots of the waiters that go before it on the
// windows it may use (predictWait), and, of those, the slots of its own
// tenant name's waiters (of its priority and above), which share its
// tenant's account.
func (c *Core) slotsAhead(now time.Time, it *item, own tenantKey, w float64) (ahead, acctAhead int) {
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
				if k.name == own.name {
					acctAhead += o.seqs
				}
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
	ahead, acctAhead = higher+mine, acctAhead+mine
	if len(c.others) > 0 {
		n := float64(mine + it.seqs)
		for v, slots := range c.others {
			ahead += int(min(float64(slots), math.Ceil(n*v.weight/w))) // in float: a huge weight cannot overflow
		}
		clear(c.others)
	}
	return ahead, acctAhead
}

// guaranteedFor reports whether the slots kept for account a (its min
// share's, below what it holds) on the windows it may use cover its own
// waiters ahead of it and itself: no other tenant, of any priority, is
// granted those slots (shareOK), so only they go before it.
func (c *Core) guaranteedFor(a *account, it *item, acctAhead int) bool {
	if a == nil || a.min <= 0 {
		return false
	}
	kept := 0
	for _, win := range c.windows {
		if c.usable(win, it.exclude) {
			kept += max(int(math.Floor(a.min*float64(win.limit)))-win.used[a], 0)
		}
	}
	return kept >= acctAhead+it.seqs
}

// capWait is, for a waiter of account a capped below the whole window, how
// long until enough of its tenant's own slots have ended for its tenant's
// waiters ahead and itself to fit under the cap on the windows it may use:
// that excess (at most what the tenant holds: a request larger than its cap
// runs once it holds nothing) over the rate its slots end at, each window's
// rate times the tenant's part of what it holds. ok is false when the cap
// does not bind, or the tenant holds nothing with a measured rate.
func (c *Core) capWait(now time.Time, a *account, it *item, acctAhead int) (secs float64, ok bool) {
	if a == nil || a.max >= 1 {
		return 0, false
	}
	limit, used := 0, 0
	var rate float64
	for _, win := range c.windows {
		if !c.usable(win, it.exclude) {
			continue
		}
		u := win.used[a]
		limit += int(math.Ceil(a.max * float64(win.limit)))
		used += u
		if u > 0 {
			rate += win.rateAt(now) * float64(u) / float64(max(win.inflight, u))
		}
	}
	excess := min(used+acctAhead+it.seqs-limit, used+acctAhead)
	if excess <= 0 || rate <= 0 {
		return 0, false
	}
	return float64(excess) / rate, true
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
