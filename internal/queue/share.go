package queue

import (
	"fmt"
	"math"
	"sort"
)

// Share guarantees or caps one tenant's part of every window (Settings.Shares),
// as fractions of the window's current limit in slots (sequences), so that
// a window cut by pressure cuts every share with it.
type Share struct {
	// Min is the part of each window kept for the tenant: floor(Min × limit)
	// slots that no other tenant is granted while the tenant holds fewer,
	// even when it has nothing waiting, so that its next request starts at
	// once. 0 (the default) reserves nothing; valid range [0, 1], and the
	// Mins of all tenants must sum to at most 1.
	Min float64
	// Max caps the tenant's part of each window at ceil(Max × limit) slots:
	// a tenant at its cap waits even when the window has room. A request
	// larger than the cap alone still runs while the tenant holds nothing
	// there. 0 means 1 (no cap); valid range [0, 1] and at least Min.
	Max float64
}

// account is one tenant name's part of the windows (every priority's tenant
// of that name shares it). It exists only while shares are on.
type account struct {
	name     string
	min, max float64 // max is 1 without a cap
	refs     int     // tenants (one per priority) that point to it
}

// sharesOn reports whether s guarantees or caps any tenant.
func (s *Settings) sharesOn() bool {
	return len(s.Shares) > 0 || s.DefaultMaxShare > 0 && s.DefaultMaxShare < 1
}

// validShares checks Shares and DefaultMaxShare.
func (s *Settings) validShares() []error {
	var errs []error
	bad := func(v float64) bool { return !(v >= 0 && v <= 1) }
	if bad(s.DefaultMaxShare) {
		errs = append(errs, fmt.Errorf("queue: DefaultMaxShare must be in [0, 1], got %v", s.DefaultMaxShare))
	}
	names := make([]string, 0, len(s.Shares))
	for name := range s.Shares {
		names = append(names, name)
	}
	sort.Strings(names) // errors in a stable order
	sum := 0.0
	for _, name := range names {
		sh := s.Shares[name]
		switch {
		case bad(sh.Min):
			errs = append(errs, fmt.Errorf("queue: Shares[%q].Min must be in [0, 1], got %v", name, sh.Min))
		case bad(sh.Max):
			errs = append(errs, fmt.Errorf("queue: Shares[%q].Max must be in [0, 1], got %v", name, sh.Max))
		case sh.Max > 0 && sh.Min > sh.Max:
			errs = append(errs, fmt.Errorf("queue: Shares[%q].Min (%v) must not exceed its Max (%v)", name, sh.Min, sh.Max))
		default:
			sum += sh.Min
		}
	}
	if sum > 1+1e-9 {
		errs = append(errs, fmt.Errorf("queue: the Shares' Mins must sum to at most 1, got %v", sum))
	}
	return errs
}

// shareOf is the min and max share of the tenant named name.
func (s *Settings) shareOf(name string) (minS, maxS float64) {
	maxS = 1
	if s.DefaultMaxShare > 0 {
		maxS = s.DefaultMaxShare
	}
	if sh, ok := s.Shares[name]; ok {
		minS, maxS = sh.Min, 1
		if sh.Max > 0 {
			maxS = sh.Max
		}
	}
	return minS, maxS
}

// applyShares (re)builds the accounts after the settings changed: every
// remembered tenant points to its name's account, with the new shares, and
// minAccts lists those with a reservation. Turning shares off drops them;
// turning them on counts only the grants made from then on (what is in
// flight is not known by tenant and window).
func (c *Core) applyShares() {
	if !c.s.sharesOn() {
		c.shares, c.accts, c.minAccts = false, nil, nil
		for _, t := range c.tenants {
			t.acct = nil
		}
		for _, w := range c.windows {
			w.used = nil
		}
		return
	}
	if !c.shares {
		c.shares, c.accts = true, make(map[string]*account)
	}
	for _, a := range c.accts {
		a.min, a.max = c.s.shareOf(a.name)
	}
	for _, t := range c.tenants {
		if t.acct == nil {
			t.acct = c.acctFor(t.key.name)
			t.acct.refs++
		}
	}
	c.minAccts = c.minAccts[:0]
	for name, sh := range c.s.Shares {
		if sh.Min > 0 { // kept while listed (dropAcct): its reservation holds while it is idle
			c.minAccts = append(c.minAccts, c.acctFor(name))
		}
	}
	for _, a := range c.accts { // a reservation dropped by this change no longer pins its account
		c.dropAcct(a)
	}
	sort.Slice(c.minAccts, func(i, j int) bool { return c.minAccts[i].name < c.minAccts[j].name })
}

// acctFor returns name's account, creating it; the caller counts its ref.
func (c *Core) acctFor(name string) *account {
	a := c.accts[name]
	if a == nil {
		a = &account{name: name}
		a.min, a.max = c.s.shareOf(name)
		c.accts[name] = a
	}
	return a
}

// dropAcct forgets a once no tenant refers to it, it reserves nothing and
// it holds nothing on any window.
func (c *Core) dropAcct(a *account) {
	if a == nil || a.refs > 0 || a.min > 0 {
		return
	}
	for _, w := range c.windows {
		if w.used[a] > 0 {
			return
		}
	}
	delete(c.accts, a.name)
}

// lookupAcct is the account of the tenant named name, nil when it has none
// yet (it holds nothing anywhere: no cap binds it).
func (c *Core) lookupAcct(name string) *account {
	if !c.shares {
		return nil
	}
	if c.hot != nil && c.hot.key.name == name {
		return c.hot.acct
	}
	return c.accts[name]
}

// shareOK reports whether a request of seqs slots of account a (nil: a
// tenant holding nothing) may start on w under the shares: a's cap, and the
// slots reserved for the other tenants below their min share. O(tenants
// with a min share), a number the policy bounds.
func (c *Core) shareOK(w *window, a *account, seqs int) bool {
	if !c.shares {
		return true
	}
	if a != nil && a.max < 1 {
		if used := w.used[a]; used > 0 && used+seqs > int(math.Ceil(a.max*float64(w.limit))) {
			return false
		}
	}
	if r := c.reservedFor(w, a); r > 0 && w.inflight+seqs+r > w.limit {
		return false
	}
	return true
}

// reservedFor is how many of w's slots are kept for tenants other than a
// that hold fewer than their min share of it.
func (c *Core) reservedFor(w *window, a *account) int {
	r := 0
	for _, b := range c.minAccts {
		if b != a {
			r += max(int(math.Floor(b.min*float64(w.limit)))-w.used[b], 0)
		}
	}
	return r
}

// use counts slots of account a on w in or (negative) out of flight.
func (w *window) use(a *account, slots int) {
	if a == nil {
		return
	}
	if w.used == nil {
		w.used = make(map[*account]int)
	}
	switch n := w.used[a] + slots; {
	case n > 0:
		w.used[a] = n
	default:
		delete(w.used, a)
	}
}
