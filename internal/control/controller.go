package control

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// Hook names the relief hooks an upstream's level change fires.
type Hook string

// Hook events; None fires nothing.
const (
	None      Hook = ""
	Degraded  Hook = "degraded"
	Critical  Hook = "critical"
	Recovered Hook = "recovered"
)

// Cause is an upstream's last level change, as the log, the metric and
// /admin/state report it. Value is always finite.
type Cause struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Signal string `json:"signal"`
	// Source is the pressure source of the reading that caused it; with
	// Stale it names the source that went quiet.
	Source string    `json:"source,omitempty"`
	Value  float64   `json:"value"`
	Stale  bool      `json:"stale"`
	At     time.Time `json:"at"`
}

// Change is what one round decided for one upstream.
type Change struct {
	Name string
	// SlowUpdate holds the level, phase and window and what of them changed.
	breaker.SlowUpdate
	// Cause is valid when LevelChanged.
	Cause Cause
	// Hook is the relief hook event to fire, None when the level held.
	Hook Hook
	// Order is the order of the requests that may go to this upstream:
	// shortest first while its window is not in PhaseNormal, by arrival
	// otherwise; EarliestDeadline in every phase with DeadlineOrder. A queue
	// applies it per pool of upstreams (queue.SetWindowOrder).
	Order queue.Order
	// MemoryBudget bounds the estimated memory of the requests in flight to
	// this upstream, in the queue's unit (queue.SetMemoryBudget); 0 means
	// no bound. MemoryBudgetChanged says it differs from the last round's.
	MemoryBudget        int64
	MemoryBudgetChanged bool
	// TokenLimit is the token-budget window (queue.SetTokenLimit), scaled
	// with Limit; 0 means no bound. TokenLimitChanged says it differs from
	// the last round's.
	TokenLimit        int64
	TokenLimitChanged bool
	// Ceiling is the most the window may grow to since the pod failed under
	// load (PodFailed), 0 while none holds.
	Ceiling int
}

// Decision is one round's decisions, for the caller to apply exactly once.
type Decision struct {
	// Upstreams holds one Change per upstream, in settings order.
	Upstreams []Change
	// Order is shortest first while any upstream's window is not in
	// PhaseNormal (degraded, critical or recovering), EarliestDeadline always
	// with DeadlineOrder: the order of a queue in front of one pool (the
	// replay's).
	Order queue.Order
	// OrderChanged says Order differs from the previous round's.
	OrderChanged bool
}

// upstream is one upstream's slow breaker and its last level change.
type upstream struct {
	slow     *breaker.Slow
	memory   Memory
	budget   int64 // the last round's memory budget
	tokens   int64 // MaxInflightTokens
	tokenLim int64 // the last round's token limit
	maxInfl  int   // the window's MaxInflight
	cause    Cause
	caused   bool
	running  int      // the pod's last fresh count of running requests (vLLM's num_requests_running); 0 unknown
	failed   bool     // PodFailed lowered the window since the last round
	refusals overload // the pod's own 503/429, by when they came
}

// Controller turns pressure readings into decisions for every upstream.
// Create one with New. Safe for concurrent use; must not be copied.
// Observe calls are serialized; Critical and State never wait for them.
type Controller struct {
	now func() time.Time

	// mu guards names, order, deadlineOrder, changes and every upstream's
	// cause, and serialises ObserveAt and Update. ups is replaced whole
	// under it.
	mu            sync.Mutex
	names         []string
	order         queue.Order
	deadlineOrder bool
	changes       history
	ups           atomic.Pointer[map[string]*upstream]
}

// New returns a Controller with every upstream at Normal and its window at
// MaxInflight, or an error naming each invalid field of s.
func New(s Settings) (*Controller, error) {
	c := &Controller{now: s.Now}
	if c.now == nil {
		c.now = time.Now
	}
	empty := map[string]*upstream{}
	c.ups.Store(&empty)
	if err := c.Update(s); err != nil {
		return nil, err
	}
	return c, nil
}

// Check reports whether Update would accept s, without changing anything.
func (c *Controller) Check(s Settings) error { return s.validate() }

// Update applies reloaded settings. An upstream that keeps its name keeps its
// level, phase and cut history, its window clamped into the new bounds; new
// ones start at Normal; those no longer listed are dropped. s.Now is ignored.
// Everything is validated first: on error nothing changes.
func (c *Controller) Update(s Settings) error {
	if err := s.validate(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.ups.Load()
	next := make(map[string]*upstream, len(s.Upstreams))
	names := make([]string, 0, len(s.Upstreams))
	for _, u := range s.Upstreams {
		u.Slow.Now = c.now
		names = append(names, u.Name)
		if prev, ok := old[u.Name]; ok {
			_ = prev.slow.Update(u.Slow) // validated above
			prev.memory = u.Memory       // only ObserveAt reads these, under mu
			prev.tokens, prev.maxInfl = u.MaxInflightTokens, u.Slow.Window.MaxInflight
			next[u.Name] = prev
			continue
		}
		sl, _ := breaker.NewSlow(u.Slow) // validated above
		next[u.Name] = &upstream{slow: sl, memory: u.Memory, tokens: u.MaxInflightTokens, maxInfl: u.Slow.Window.MaxInflight}
	}
	c.names = names
	c.deadlineOrder = s.DeadlineOrder
	c.ups.Store(&next)
	return nil
}

// Observe decides on one round of pressure readings at the current time.
func (c *Controller) Observe(st pressure.State, backlogEmpty bool) Decision {
	return c.ObserveAt(c.now(), st, backlogEmpty)
}

// ObserveAt decides on one round of readings at now. backlogEmpty says the
// queue is empty (a recovering window is normal again only then).
func (c *Controller) ObserveAt(now time.Time, st pressure.State, backlogEmpty bool) Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	ups := *c.ups.Load()
	calm, pressed := queue.FIFO, queue.ShortestFirst
	if c.deadlineOrder {
		calm, pressed = queue.EarliestDeadline, queue.EarliestDeadline
	}
	d := Decision{Upstreams: make([]Change, 0, len(c.names)), Order: calm}
	for _, name := range c.names {
		u := ups[name]
		us, _ := st.Upstream(name)
		if v, ok := us.Signals[pressure.Running]; ok && !v.Stale && v.Value >= 0 && v.Value < math.MaxInt32 {
			u.running = int(v.Value)
		}
		readings := append(readings(us), breaker.Reading{Signal: PodOverload,
			Value: float64(u.refusals.read(now)), Source: name + "/responses"})
		ch := Change{Name: name, SlowUpdate: u.slow.ObserveAt(now, readings, backlogEmpty)}
		if u.failed { // PodFailed moved the window between rounds: pass it on now
			ch.LimitChanged, u.failed = true, false
		}
		if ch.LevelChanged {
			t := ch.Transition
			u.cause = Cause{From: t.From.String(), To: t.To.String(), Signal: t.Signal, Source: t.Source,
				Value: t.Value, Stale: t.Stale, At: now}
			u.caused = true
			ch.Cause, ch.Hook = u.cause, hookFor(t.To)
			c.changes.add(LevelChange{Upstream: name, Cause: u.cause})
		}
		ch.Order = calm
		if ch.Phase != breaker.PhaseNormal {
			ch.Order, d.Order = pressed, pressed
		}
		ch.MemoryBudget = u.memory.budget(us)
		ch.MemoryBudgetChanged, u.budget = ch.MemoryBudget != u.budget, ch.MemoryBudget
		ch.TokenLimit = tokenLimit(u.tokens, ch.Limit, u.maxInfl)
		ch.TokenLimitChanged, u.tokenLim = ch.TokenLimit != u.tokenLim, ch.TokenLimit
		ch.Ceiling, _ = u.slow.Ceiling()
		d.Upstreams = append(d.Upstreams, ch)
	}
	d.OrderChanged = d.Order != c.order
	c.order = d.Order
	return d
}

func hookFor(to breaker.Level) Hook {
	switch to {
	case breaker.Degraded:
		return Degraded
	case breaker.Critical:
		return Critical
	}
	return Recovered
}

// PodRefused records that the upstream named name answered a request 503 or
// 429 itself: its own queue is full. Rounds read the refusals as the
// PodOverload signal (see PodOverloadAnswers). It reports whether this
// refusal makes the pod overloaded while it is not yet degraded: the
// caller should run a round now rather than wait for the next poll. Safe
// to call from any request; it never waits on I/O or on a round.
func (c *Controller) PodRefused(name string) bool {
	return c.podRefusedAt(c.now(), name)
}

// podRefusedAt is PodRefused at an explicit instant (tests, the replay's
// clock).
func (c *Controller) podRefusedAt(now time.Time, name string) bool {
	u, ok := (*c.ups.Load())[name]
	if !ok {
		return false
	}
	return u.refusals.add(now) >= PodOverloadAnswers && u.slow.Current().Level < breaker.Degraded
}

// PodFailed records that the upstream named name failed under load: its
// error breaker opened (an engine out-of-memory is fatal: every request in
// flight fails with a 5xx, then the server) while inflight sequences ran on
// it from this gatekeeper. The load it failed at is the larger of inflight
// and the pod's own last count of running requests (which counts every
// replica's); when that is at least half the window, the window gets a
// ceiling it never grows past (breaker.Window.Fail). It reports whether the
// ceiling was set or lowered; the next round's Change carries it (with
// LimitChanged, since the window fell with it). Safe to
// call from any goroutine; it never blocks on I/O.
func (c *Controller) PodFailed(name string, inflight int) bool {
	return c.PodFailedAt(c.now(), name, inflight)
}

// PodFailedAt is PodFailed at an explicit instant (the replay's clock).
func (c *Controller) PodFailedAt(now time.Time, name string, inflight int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, ok := (*c.ups.Load())[name]
	if !ok {
		return false
	}
	if !u.slow.Fail(now, max(inflight, u.running)) {
		return false
	}
	u.failed = true
	return true
}

// Ceiling returns the window ceiling of the upstream named name since it
// failed under load, and when it was set or last refreshed; 0 while none
// holds or for an unknown name.
func (c *Controller) Ceiling(name string) (int, time.Time) {
	u, ok := (*c.ups.Load())[name]
	if !ok {
		return 0, time.Time{}
	}
	return u.slow.Ceiling()
}

// Critical reports whether the upstream named name is at level critical:
// it takes no new work (DESIGN §4). Unknown names are not critical. It is
// a map lookup and an atomic load: the dispatch path calls it.
func (c *Controller) Critical(name string) bool {
	u, ok := (*c.ups.Load())[name]
	return ok && u.slow.Current().Level == breaker.Critical
}

// Degraded reports whether the upstream named name is degraded or worse.
func (c *Controller) Degraded(name string) bool {
	u, ok := (*c.ups.Load())[name]
	return ok && u.slow.Current().Level >= breaker.Degraded
}

// State returns an upstream's level, phase and window, its last level
// change (nil before the first), and whether the upstream is known.
func (c *Controller) State(name string) (breaker.SlowState, *Cause, bool) {
	u, ok := (*c.ups.Load())[name]
	if !ok {
		return breaker.SlowState{}, nil, false
	}
	c.mu.Lock()
	cause, caused := u.cause, u.caused
	c.mu.Unlock()
	if !caused {
		return u.slow.Current(), nil, true
	}
	return u.slow.Current(), &cause, true
}

// LevelWindow returns an upstream's level name and window, as the admission
// span shows them; "" and 0 for an upstream the Controller does not know.
func (c *Controller) LevelWindow(name string) (string, int) {
	st, _, ok := c.State(name)
	if !ok {
		return "", 0
	}
	return st.Level.String(), st.Limit
}

// Changes returns the latest level changes over every upstream, newest
// first: at most ChangeHistory, those this Controller made (a restart
// starts empty; a reload keeps them, those of upstreams it removed too).
// The slice is the caller's.
func (c *Controller) Changes() []LevelChange {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changes.list()
}

// readings turns one upstream's signals into the breaker's readings, in
// pressure.Signals order, each naming its source. Only signals some source
// has yielded are read: a source that never answered adds nothing (a
// configuration problem, shown in State and alerted on, not pressure), and
// one that went quiet reports its last values as stale, so on_stale applies
// to the signals it carried and the level change names it.
func readings(us pressure.UpstreamState) []breaker.Reading {
	out := make([]breaker.Reading, 0, len(us.Signals))
	for _, sig := range pressure.Signals() {
		if v, ok := us.Signals[sig]; ok {
			out = append(out, breaker.Reading{Signal: string(sig), Value: v.Value, Stale: v.Stale, Source: v.Source})
		}
	}
	return out
}
