package cluster

import (
	"math"
	"sync"
	"time"
)

// Demand is what this replica has of one pod's window now, in the window's
// own slots (sequences): those running and those its queue holds for it.
type Demand struct {
	inFlight int
	waiting  int
	// window is the pod's window as the slow breaker sets it now (0: its
	// largest): the unit of InFlight and Waiting.
	window int
}

// share is this replica's lease on one pod's window. Units are slots of
// base, the pod's largest window (max_inflight): the replicas' grants sum
// to at most base in Redis, and each replica scales what it holds onto the
// window the slow breaker sets now (Scale).
type share struct {
	pod   string
	base  int // the pod's largest window; 0: the pod was removed
	grant int // what Redis granted at the last renewal that answered
	// cap is what admission uses now: grant while the lease is fresh,
	// min(grant, floor) once it lapsed (no renewal for LeaseTTL/2).
	cap int
	// owed: the last answer said more may come soon (the fair target was
	// above the grant, or capacity was free), so a replica with waiters
	// asks again before the next heartbeat.
	owed bool
	// wants is the demand last reported, in base's slots.
	wants int
	// granted: a renewal answered for this pod once. One that never did
	// has no reservation to keep within: it takes its floor on a lapse.
	granted bool
	// holder: a renewal granted a slot of this pod once. One that never
	// did is fresh: in a new epoch's first lease time it may take its
	// floor once the write-back time has passed (see the package comment).
	holder bool
	// sentFloor is the floor the last beat sent; lapseFloor the least
	// floor Redis may hold for this replica's entry (that of the last beat
	// that answered, or of one sent since whose answer was lost): a lapse
	// goes no higher, so this replica never runs above what Redis reserves
	// for it once its lease expires. floorKnown: a beat has set them.
	sentFloor, lapseFloor int
	floorKnown            bool
}

// shares is the lease state of every pod, guarded by its own lock.
type shares struct {
	mu   sync.Mutex
	pods map[string]*share
	// renewed is when the last renewal that answered was sent: a lease
	// runs LeaseTTL from then, on this replica's clock.
	renewed time.Time
	lapsed  bool // the leases lapsed: caps are at the floor
	// confirm: a cap shrank at the last renewal, whose held slots Redis
	// still counts at the old cap until the next one says the answer
	// arrived: worth a beat before the heartbeat is due.
	confirm bool
	// seen is the most replicas announced at once within the last
	// ForgetAfter: the floor divides base by it.
	seen []seenAt
	// epoch is the one the last answer named (epochKnown: an answer
	// came). prior is the most replicas seen before the epoch changed to
	// it, sent with every beat until priorUntil (LeaseTTL + ForgetAfter
	// later): the new epoch keeps their floors for them (beatScript).
	epoch      int64
	epochKnown bool
	prior      int
	priorUntil time.Time
}

type seenAt struct {
	at time.Time
	n  int
}

// SetPods declares the pods whose windows the replicas share and each
// one's largest window (max_inflight, ≥ 1): the unit of the leases. A pod
// left out is no longer leased: its share is dropped here and its entry in
// Redis expires. A new pod starts with no share until a renewal grants one
// (or, while Redis cannot be reached, at the floor). Call it at start and
// whenever the pods or their max_inflight change; OnShares follows.
func (c *Cluster) SetPods(base map[string]int) {
	c.sh.mu.Lock()
	for pod, b := range base {
		if b < 1 {
			continue
		}
		s := c.sh.pods[pod]
		if s == nil {
			// Nothing until a renewal grants it, or the floor once the
			// leases lapsed (Redis out of reach).
			s = &share{pod: pod}
			c.sh.pods[pod] = s
			if c.sh.lapsed {
				s.cap = c.floorLocked(b)
				s.grant = s.cap
			}
		}
		if s.base != b { // a new unit: what was held no longer compares
			s.grant = min(s.grant, b)
			s.cap = min(s.cap, b)
		}
		s.base = b
	}
	for pod := range c.sh.pods {
		if _, ok := base[pod]; !ok {
			delete(c.sh.pods, pod)
		}
	}
	c.sh.mu.Unlock()
	c.sharesChanged()
}

// Scale maps a pod's bounds as the slow breaker sets them (its window
// limit, memory budget and token limit; 0 for a budget means none) onto
// this replica's part of them: each times its share ÷ base (Snapshot's Cap
// and Base), the window rounded down, so that the replicas' parts sum to
// at most the whole. A pod that SetPods never declared gets nothing
// (window 0, budgets 1). Pure: no I/O.
func (c *Cluster) Scale(pod string, limit int, budget, tokens int64) (int, int64, int64) {
	c.sh.mu.Lock()
	s := c.sh.pods[pod]
	capacity, base := 0, 1
	if s != nil {
		capacity, base = s.cap, s.base
	}
	c.sh.mu.Unlock()
	if capacity >= base {
		return limit, budget, tokens
	}
	part := func(v int64) int64 {
		if v <= 0 {
			return v
		}
		// Rounded down, at least 1: a budget of 0 would mean unbounded.
		return max(1, int64(math.Floor(float64(v)*float64(capacity)/float64(base))))
	}
	w := int(math.Floor(float64(max(limit, 0)) * float64(capacity) / float64(base)))
	return w, part(budget), part(tokens)
}

// Holding reports whether this replica holds a share of some declared
// pod's window (or declares none): false while it may admit nothing at all,
// as before a new replica's first grant (in a new epoch, the write-back
// time after its start).
func (c *Cluster) Holding() bool {
	c.sh.mu.Lock()
	defer c.sh.mu.Unlock()
	if len(c.sh.pods) == 0 {
		return true
	}
	for _, s := range c.sh.pods {
		if s.cap > 0 {
			return true
		}
	}
	return false
}

// floorLocked is the share a replica keeps without Redis: base divided by
// the most replicas seen lately, rounded down. c.sh.mu is held.
func (c *Cluster) floorLocked(base int) int {
	return base / max(1, c.seenLocked())
}

// seenLocked is the most replicas seen within ForgetAfter, at least
// Settings.Replicas before anything was seen. c.sh.mu is held.
func (c *Cluster) seenLocked() int {
	n := 0
	for _, s := range c.sh.seen {
		n = max(n, s.n)
	}
	if n == 0 {
		return c.s.Replicas
	}
	return n
}

// saw records a replica count from a renewal at now and drops the counts
// older than ForgetAfter. c.sh.mu is held.
func (c *Cluster) sawLocked(now time.Time, n int) {
	keep := c.sh.seen[:0]
	for _, s := range c.sh.seen {
		if now.Sub(s.at) < c.s.ForgetAfter {
			keep = append(keep, s)
		}
	}
	c.sh.seen = append(keep, seenAt{at: now, n: n})
}

// lapse puts every cap at min(grant, floor) once no renewal has answered
// for LeaseTTL/2, so that what this replica still runs above its floor
// has the other half of the lease to finish before Redis lets the other
// replicas take it; a pod never granted (Redis out of reach since start)
// gets the floor. It reports whether a cap changed.
func (c *Cluster) lapse(now time.Time) bool {
	c.sh.mu.Lock()
	defer c.sh.mu.Unlock()
	if c.sh.lapsed || now.Sub(c.sh.renewed) < c.s.LeaseTTL/2 {
		return false
	}
	c.sh.lapsed = true
	changed := false
	for _, s := range c.sh.pods {
		f := c.floorLocked(s.base)
		if s.granted {
			f = min(s.cap, s.lapseFloor, f)
		}
		if f != s.cap {
			s.cap, changed = f, true
		}
		s.owed = false
	}
	return changed
}

// sharesChanged tells Settings.OnShares, outside every lock.
func (c *Cluster) sharesChanged() {
	if c.s.OnShares != nil {
		c.s.OnShares()
	}
}

// PodShare is one pod's lease in a Snapshot.
type PodShare struct {
	// Base is the pod's largest window, the unit of the leases.
	Base int `json:"base"`
	// Grant is what Redis granted at the last renewal that answered; Cap
	// is what admission uses now (the floor once the lease lapsed).
	Grant int `json:"grant"`
	Cap   int `json:"cap"`
	// Wants is the demand last reported (in-flight and waiting slots).
	Wants int `json:"wants"`
}
