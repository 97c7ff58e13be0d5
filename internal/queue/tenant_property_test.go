package queue

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// tmodel is a slow, obviously correct reference for Core's tenants (FIFO
// order, every window available): waiters in a slice, counters in a map,
// each dispatch a search over the waiters.
type tmodel struct {
	wins    []*mwin // sorted by name
	wait    []*titem
	tenants map[tenantKey]*mtenant
	last    map[int]*mtenant // per priority: the tenant granted last
	max     int              // MaxTenants
	seq     uint64
}

type titem struct {
	id, seq uint64
	key     tenantKey
	service int64
	exclude []string
}

type mtenant struct {
	key               tenantKey
	weight, counter   float64
	service           int64
	waiting, inflight int
}

func (m *tmodel) choose(exclude []string) *mwin {
	var best *mwin
	for _, w := range m.wins {
		if w.room() > 0 && !slices.Contains(exclude, w.name) && (best == nil || w.room() > best.room()) {
			best = w
		}
	}
	return best
}

func (m *tmodel) tenant(r Request) *mtenant {
	k := tenantKey{r.Priority, r.Tenant}
	t := m.tenants[k]
	if t == nil {
		t = &mtenant{key: k}
		m.tenants[k] = t
	}
	t.weight = weightOf(r.Weight)
	return t
}

// arrive is the lift: to the least counter backlogged in the priority, or
// with none to the last granted's.
func (m *tmodel) arrive(t *mtenant) {
	if t.waiting > 0 {
		return
	}
	var least *mtenant
	for _, o := range m.tenants {
		if o.key.priority == t.key.priority && o.waiting > 0 && (least == nil || o.counter < least.counter) {
			least = o
		}
	}
	switch {
	case least != nil:
		t.counter = max(t.counter, least.counter)
	case m.last[t.key.priority] != nil:
		t.counter = max(t.counter, m.last[t.key.priority].counter)
	}
}

func (m *tmodel) charge(t *mtenant, service int64) {
	t.counter += float64(service) / t.weight
	t.service += service
	t.inflight++
	m.last[t.key.priority] = t
}

// idle forgets, when t has just become idle, the idle tenants beyond max,
// least counter (then priority, name) first.
func (m *tmodel) idle(t *mtenant) {
	if t.waiting > 0 || t.inflight > 0 {
		return
	}
	for {
		var idle []*mtenant
		for _, o := range m.tenants {
			if o.waiting == 0 && o.inflight == 0 {
				idle = append(idle, o)
			}
		}
		if len(idle) <= m.max {
			return
		}
		least := slices.MinFunc(idle, func(a, b *mtenant) int {
			return cmp.Or(cmp.Compare(a.counter, b.counter), cmp.Compare(a.key.priority, b.key.priority),
				strings.Compare(a.key.name, b.key.name))
		})
		delete(m.tenants, least.key)
	}
}

func (m *tmodel) enqueue(r Request) (Grant, bool, error) {
	service := max(r.Service, 0)
	if w := m.choose(r.Exclude); w != nil {
		w.inflight++
		t := m.tenant(r)
		m.arrive(t)
		m.charge(t, service)
		return Grant{ID: r.ID, Upstream: w.name, Tenant: r.Tenant, Priority: r.Priority, Service: service}, true, nil
	}
	if len(m.wins) > 0 && !slices.ContainsFunc(m.wins, func(w *mwin) bool { return !slices.Contains(r.Exclude, w.name) }) {
		return Grant{}, false, ErrUnavailable
	}
	t := m.tenant(r)
	m.arrive(t)
	t.waiting++
	m.seq++
	m.wait = append(m.wait, &titem{id: r.ID, seq: m.seq, key: t.key, service: service, exclude: r.Exclude})
	return Grant{}, false, nil
}

// dispatch: of the waiters not passed over, the highest priority, its
// least-counter tenant (ties: oldest waiter), that tenant's oldest.
func (m *tmodel) dispatch() []Grant {
	var grants []Grant
	passed := map[*titem]bool{}
	for slices.ContainsFunc(m.wins, func(w *mwin) bool { return w.room() > 0 }) {
		var best *titem
		for _, it := range m.wait {
			if passed[it] {
				continue
			}
			if best == nil || m.goesFirst(it, best) {
				best = it
			}
		}
		if best == nil {
			break
		}
		w := m.choose(best.exclude)
		if w == nil {
			passed[best] = true
			continue
		}
		w.inflight++
		t := m.tenants[best.key]
		m.charge(t, best.service)
		t.waiting--
		m.wait = slices.DeleteFunc(m.wait, func(x *titem) bool { return x == best })
		grants = append(grants, Grant{ID: best.id, Upstream: w.name, Tenant: best.key.name, Priority: best.key.priority,
			Service: best.service})
	}
	return grants
}

// goesFirst: a is considered before b (m.wait is in arrival order, so the
// first waiter seen of a tenant is its oldest).
func (m *tmodel) goesFirst(a, b *titem) bool {
	if a.key.priority != b.key.priority {
		return a.key.priority > b.key.priority
	}
	ta, tb := m.tenants[a.key], m.tenants[b.key]
	if ta != tb && ta.counter != tb.counter {
		return ta.counter < tb.counter
	}
	return a.seq < b.seq
}

func (m *tmodel) release(g Grant) []Grant {
	if t := m.tenants[tenantKey{g.Priority, g.Tenant}]; t != nil && t.inflight > 0 {
		t.inflight--
		m.idle(t)
	}
	for _, w := range m.wins {
		if w.name == g.Upstream && w.inflight > 0 {
			w.inflight--
		}
	}
	return m.dispatch()
}

func (m *tmodel) settle(g Grant, actual int64) {
	if t := m.tenants[tenantKey{g.Priority, g.Tenant}]; t != nil {
		d := max(actual, 0) - g.Service
		t.service += d
		t.counter += float64(d) / t.weight
	}
}

func (m *tmodel) cancel(id uint64) bool {
	i := slices.IndexFunc(m.wait, func(it *titem) bool { return it.id == id })
	if i < 0 {
		return false
	}
	t := m.tenants[m.wait[i].key]
	m.wait = slices.Delete(m.wait, i, i+1)
	t.waiting--
	m.idle(t)
	return true
}

// TestCoreTenantsMatchModel drives a Core and the model with the same random
// arrivals (six tenants, two priorities, random weights, services and
// excludes), releases, settles, cancels and window changes, and compares
// every grant and every remembered tenant's counter, counts and service.
func TestCoreTenantsMatchModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(seed, 26))
			c, err := NewCore(Settings{MaxLength: 1000, MaxTokens: 1 << 40, MaxTenants: 3})
			if err != nil {
				t.Fatal(err)
			}
			m := &tmodel{tenants: map[tenantKey]*mtenant{}, last: map[int]*mtenant{}, max: 3}
			var held, unsettled []Grant
			var next uint64
			compare := func(i int, op string, got, want []Grant) {
				t.Helper()
				held = append(held, got...) // with their Cost: Release needs its tenant id
				unsettled = append(unsettled, got...)
				got = slices.Clone(got)
				for j := range got {
					got[j].Cost = Cost{}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("step %d: %s = %v, model %v", i, op, got, want)
				}
			}
			for i := range 3000 {
				var op string
				switch k := r.IntN(100); {
				case k < 40:
					next++
					q := Request{ID: next, Tenant: fmt.Sprint("t", r.IntN(6)), Service: int64(r.IntN(1100)) - 100,
						Weight: []float64{0, 1, 2, 3, 0.5}[r.IntN(5)]}
					if r.IntN(5) == 0 {
						q.Priority = 1
					}
					if r.IntN(6) == 0 {
						q.Exclude = []string{[]string{"a", "b", "c"}[r.IntN(3)]}
					}
					op = fmt.Sprintf("Enqueue(%+v)", q)
					g, ok, err := c.Enqueue(t0, q)
					mg, mok, merr := m.enqueue(q)
					if ok {
						held, unsettled = append(held, g), append(unsettled, g)
					}
					g.Cost = Cost{}
					if ok != mok || g != mg || err != merr {
						t.Fatalf("step %d: %s = %v %v %v, model %v %v %v", i, op, g, ok, err, mg, mok, merr)
					}
				case k < 70 && len(held) > 0:
					j := r.IntN(len(held))
					g := held[j]
					held = slices.Delete(held, j, j+1)
					op = fmt.Sprintf("Release(%+v)", g)
					compare(i, op, c.Release(t0, g.Upstream, g.Cost), m.release(g))
				case k < 80 && len(unsettled) > 0:
					j := r.IntN(len(unsettled))
					g := unsettled[j]
					unsettled = slices.Delete(unsettled, j, j+1)
					actual := int64(r.IntN(1200)) - 50
					op = fmt.Sprintf("Settle(%+v, %d)", g, actual)
					c.Settle(g.Tenant, g.Priority, g.Service, actual)
					m.settle(g, actual)
				case k < 88 && len(m.wait) > 0:
					id := m.wait[r.IntN(len(m.wait))].id
					op = fmt.Sprintf("Cancel(%d)", id)
					got, grants := c.Cancel(t0, id)
					if !got || len(grants) > 0 || !m.cancel(id) {
						t.Fatalf("step %d: %s = %v %v", i, op, got, grants)
					}
				case k < 95:
					name, limit := []string{"a", "b", "c"}[r.IntN(3)], r.IntN(4)
					op = fmt.Sprintf("SetWindow(%s, %d)", name, limit)
					c.SetWindow(name, limit)
					if w := slices.IndexFunc(m.wins, func(w *mwin) bool { return w.name == name }); w >= 0 {
						m.wins[w].limit = limit
					} else {
						m.wins = append(m.wins, &mwin{name: name, limit: limit})
						slices.SortFunc(m.wins, func(a, b *mwin) int { return strings.Compare(a.name, b.name) })
					}
					compare(i, op, c.Dispatch(t0), m.dispatch())
				default:
					continue
				}
				checkHeaps(t, c)
				checkTenants(t, c)
				compareTenants(t, i, op, c, m)
			}
		})
	}
}

// compareTenants checks that the Core remembers exactly the model's tenants,
// with the same counters (bit for bit: the same operations in the same
// order), weights, counts and service.
func compareTenants(t *testing.T, i int, op string, c *Core, m *tmodel) {
	t.Helper()
	if len(c.tenants) != len(m.tenants) {
		t.Fatalf("step %d after %s: %d tenants remembered, model %d", i, op, len(c.tenants), len(m.tenants))
	}
	for k, mt := range m.tenants {
		ct := c.tenants[k]
		if ct == nil || ct.counter != mt.counter || ct.weight != mt.weight || ct.waiting != mt.waiting ||
			ct.inflight != mt.inflight || ct.service != mt.service {
			t.Fatalf("step %d after %s: tenant %v = %+v, model %+v", i, op, k, ct, mt)
		}
	}
}
