package quota

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"
)

// defaultMaxClients is how many client keys a Quotas remembers by default.
const defaultMaxClients = 100000

// Settings configures a Quotas. The zero value selects the defaults.
type Settings struct {
	// maxClients is how many client keys are remembered at most. When a new
	// one must be, one is forgotten first: among the 16 least recently
	// charged, the least recent whose windows are empty, else the least
	// recently charged of all (its charges are then lost: memory is bounded
	// before the quota is). 0 means DefaultMaxClients; otherwise ≥ 1.
	maxClients int
	// Now returns the current time. Nil means time.Now. A clock that steps
	// back is held at the latest time it returned.
	Now func() time.Time
}

// Ask is one request's charge.
type Ask struct {
	// Client is the client key (the per-client header's value, raw: it is
	// hashed on entry and never stored); "" when the request has none.
	Client string
	// Class and Model name the request's traffic class and model; "" when
	// that kind does not apply.
	Class, Model string
	// Estimate is what the request is charged now, in tokens: its prompt
	// estimate plus its most output tokens. A negative one counts as 0.
	Estimate int64
	// Force charges the request even when a quota lacks room, and still
	// returns the *ExceededError (shadow mode: count, do not refuse).
	Force bool
}

// Quotas counts tokens against the quotas of client keys, traffic classes
// and models, per sliding minute and per sliding day (see the package
// comment). Create one with New. Safe for concurrent use; must not be
// copied.
type Quotas struct {
	now        func() time.Time
	maxClients int

	// mu guards everything below.
	mu     sync.Mutex
	lim    *compiled
	latest time.Time // the latest time seen: the clock never steps back
	// clients are the client keys remembered, by hash, in a recency list
	// (lru.next the most recently charged, lru.prev the least).
	clients         map[[32]byte]*entry
	lru             entry
	classes, models map[string]*entry
}

// entry is one key's counts, in both windows.
type entry struct {
	w    [2]ring
	name string // the class or model name, or the client's short name
	// Clients only: the hash and the recency list.
	hash       [32]byte
	prev, next *entry
	// gone: the key was forgotten (a client evicted, a class or model
	// dropped from the limits); a settle of an earlier charge is dropped.
	gone bool
}

// New returns a Quotas for s with no limit (see SetLimits), or an error
// naming each invalid field.
func New(s Settings) (*Quotas, error) {
	if s.maxClients < 0 {
		return nil, fmt.Errorf("quota: Settings.MaxClients = %d, want ≥ 1 (0: %d)", s.maxClients, defaultMaxClients)
	}
	if s.maxClients == 0 {
		s.maxClients = defaultMaxClients
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	q := &Quotas{
		now:        s.Now,
		maxClients: s.maxClients,
		lim:        compile(Limits{}),
		clients:    make(map[[32]byte]*entry),
		classes:    make(map[string]*entry),
		models:     make(map[string]*entry),
	}
	q.lru.next, q.lru.prev = &q.lru, &q.lru
	return q, nil
}

// SetLimits installs the quotas of a (re)loaded policy from the next
// charge on. What was charged stays counted, also against a limit that
// changed or appeared; the counts of a class or model no longer limited
// are forgotten once its windows are empty. On error (see
// Limits.Validate) nothing changes.
func (q *Quotas) SetLimits(l Limits) error {
	if err := l.Validate(); err != nil {
		return err
	}
	c := compile(l)
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	now = q.clockLocked(now)
	q.lim = c
	dropEmpty(q.classes, c.classes, now)
	dropEmpty(q.models, c.models, now)
	return nil
}

// dropEmpty forgets the entries that limits no longer name and whose
// windows are empty at now.
func dropEmpty(entries map[string]*entry, limits map[string]Limit, now time.Time) {
	for name, e := range entries {
		if _, ok := limits[name]; !ok && e.empty(now) {
			e.gone = true
			delete(entries, name)
		}
	}
}

// empty reports whether e counts nothing at now.
func (e *entry) empty(now time.Time) bool {
	for w, g := range windows {
		if e.w[w].trim(g.oldest(g.index(now))) != 0 {
			return false // counts are never negative: 0 means no bucket kept
		}
	}
	return true
}

// clockLocked holds the clock at the latest time seen, on the wall clock
// (buckets are wall-clock intervals: a wall clock stepped back must not
// pass for a later time by its monotonic reading). q.mu is held.
func (q *Quotas) clockLocked(now time.Time) time.Time {
	now = now.Round(0)
	if now.Before(q.latest) {
		return q.latest
	}
	q.latest = now
	return now
}

// target is one key a charge applies to.
type target struct {
	kind int   // index into kinds
	lim  Limit // its quota
	e    *entry
	name string   // class or model name
	hash [32]byte // client key hash
}

// Charge charges a's estimate, now, against every quota that applies to it
// (the client key's, the class's, the model's; each per minute and per
// day), all or nothing: when one lacks room nothing is charged (unless
// a.Force) and the error is an *ExceededError (errors.Is ErrExceeded) with
// RetryAfter. An estimate above a limit is charged as the limit, so it
// fits once that window is empty. Call the Settler once the response's
// usage is known; it is never nil, and a no-op when nothing was charged
// (no quota applies, or a refusal). ctx is not used: the charge is local
// and never waits (the shared quotas in cluster, which call Redis, end
// with it).
func (q *Quotas) Charge(_ context.Context, a Ask) (Settler, error) {
	var h [32]byte
	if a.Client != "" {
		h = sha256.Sum256([]byte(a.Client))
	}
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.chargeLocked(q.clockLocked(now), a, h)
}

// chargeLocked is Charge at now, with the client key hashed to h. q.mu is
// held.
func (q *Quotas) chargeLocked(now time.Time, a Ask, h [32]byte) (Settler, error) {
	var ts [3]target
	n := 0
	if a.Client != "" {
		if l := q.lim.client(h); l.limited() {
			ts[n] = target{kind: 0, lim: l, e: q.clients[h], hash: h}
			n++
		}
	}
	if l, ok := q.lim.classes[a.Class]; ok && a.Class != "" {
		ts[n] = target{kind: 1, lim: l, e: q.classes[a.Class], name: a.Class}
		n++
	}
	if l, ok := q.lim.models[a.Model]; ok && a.Model != "" {
		ts[n] = target{kind: 2, lim: l, e: q.models[a.Model], name: a.Model}
		n++
	}
	if n == 0 {
		return noop{}, nil
	}
	est := max(a.Estimate, 0)
	cur := [2]int64{windows[0].index(now), windows[1].index(now)}
	worst := q.refusalLocked(ts[:n], est, cur, now)
	if worst != nil && !a.Force {
		return noop{}, worst
	}
	s := &settler{q: q, n: n, cur: cur}
	for i, t := range ts[:n] {
		if t.e == nil {
			t.e = q.rememberLocked(t, now)
		}
		s.e[i] = t.e
		for w, g := range windows {
			charge := est
			if limit := t.lim.of(w); limit > 0 {
				charge = min(est, limit)
			}
			t.e.w[w].trim(g.oldest(cur[w]))
			t.e.w[w].add(cur[w], charge)
			s.charged[i][w] = charge
		}
	}
	if worst != nil {
		return s, worst
	}
	return s, nil
}

// refusalLocked returns the refusal of a charge of est in the current
// buckets cur against ts, or nil when every limited window has room: of
// the windows without room, the one whose room comes last (the first of
// them on a tie). q.mu is held.
func (q *Quotas) refusalLocked(ts []target, est int64, cur [2]int64, now time.Time) *ExceededError {
	var worst *ExceededError
	var worstAt time.Time
	for _, t := range ts {
		if t.e == nil {
			continue // nothing counted: every clamped estimate fits
		}
		if t.kind == 0 {
			q.touch(t.e)
		}
		for w, g := range windows {
			limit := t.lim.of(w)
			if limit == 0 {
				continue
			}
			r, charge := &t.e.w[w], min(est, limit)
			used := r.trim(g.oldest(cur[w]))
			if used+charge <= limit {
				continue
			}
			b, _ := r.freedBy(limit, charge) // found: charge ≤ limit
			if at := g.expiry(b); worst == nil || at.After(worstAt) {
				worst = &ExceededError{Kind: kinds[t.kind], Name: t.e.name, Window: g.length,
					Limit: limit, Used: used, Charge: charge, Wait: max(at.Sub(now), minWait)}
				worstAt = at
			}
		}
	}
	return worst
}
