package queue

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// rig is a Core under a tenant step table: it remembers every request
// enqueued (to check its grant's tenant fields) and every grant held (so a
// release or a settle names its request).
type rig struct {
	c    *Core
	reqs map[uint64]Request
	held map[uint64]Grant
}

// tact is one call on a rig; it returns the grants the call made.
type tact struct {
	desc string
	run  func(r *rig, now time.Time) ([]Grant, error)
}

// tstep advances the clock to at, acts, and wants the grants listed as
// "<id><upstream>" (for example "3a") in that order, or err.
type tstep struct {
	at   time.Duration
	act  tact
	want []string
	err  error
}

func win(name string, limit int) tact {
	return tact{fmt.Sprintf("SetWindow(%s, %d)", name, limit), func(r *rig, now time.Time) ([]Grant, error) {
		r.c.SetWindow(name, limit)
		return r.c.Dispatch(now), nil
	}}
}

// enqT enqueues request id of tenant with the given service.
func enqT(id uint64, tenant string, service int64) tact {
	return enqR(Request{ID: id, Tenant: tenant, Service: service, Tokens: 1})
}

// enqR enqueues q as it is.
func enqR(q Request) tact {
	return tact{fmt.Sprintf("Enqueue(%+v)", q), func(r *rig, now time.Time) ([]Grant, error) {
		r.reqs[q.ID] = q
		g, ok, err := r.c.Enqueue(now, q)
		if ok {
			return []Grant{g}, err
		}
		return nil, err
	}}
}

// rel releases the slot granted to id.
func rel(id uint64) tact {
	return tact{fmt.Sprintf("Release(%d)", id), func(r *rig, now time.Time) ([]Grant, error) {
		g, ok := r.held[id]
		if !ok {
			return nil, fmt.Errorf("request %d holds no slot", id)
		}
		delete(r.held, id)
		return r.c.Release(now, g.Upstream, g.Cost), nil
	}}
}

// settleT settles id's grant at actual.
func settleT(id uint64, actual int64) tact {
	return tact{fmt.Sprintf("Settle(%d, %d)", id, actual), func(r *rig, _ time.Time) ([]Grant, error) {
		q := r.reqs[id]
		r.c.Settle(q.Tenant, q.Priority, max(q.Service, 0), actual)
		return nil, nil
	}}
}

func cancelT(id uint64) tact {
	return tact{fmt.Sprintf("Cancel(%d)", id), func(r *rig, now time.Time) ([]Grant, error) {
		_, grants := r.c.Cancel(now, id)
		return grants, nil
	}}
}

// tenants checks Stats.Tenants, each written "name:counter/waiting/inflight"
// ("name@p:…" at a priority p other than 0), and Stats.TenantCount.
func tenants(count int, want ...string) tact {
	return tact{"Stats tenants", func(r *rig, _ time.Time) ([]Grant, error) {
		s := r.c.Stats()
		var got []string
		for _, t := range s.Tenants {
			name := t.Tenant
			if t.Priority != 0 {
				name += fmt.Sprintf("@%d", t.Priority)
			}
			got = append(got, fmt.Sprintf("%s:%g/%d/%d", name, t.Counter, t.Waiting, t.InFlight))
		}
		if s.TenantCount != count || !slices.Equal(got, want) {
			return nil, fmt.Errorf("Stats() = %d tenants %v, want %d %v", s.TenantCount, got, count, want)
		}
		return nil, nil
	}}
}

func runTenantSteps(t *testing.T, s Settings, steps []tstep) {
	t.Helper()
	c, err := NewCore(s)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{c: c, reqs: map[uint64]Request{}, held: map[uint64]Grant{}}
	for i, st := range steps {
		grants, err := st.act.run(r, t0.Add(st.at))
		if !errors.Is(err, st.err) || (st.err == nil && err != nil) {
			t.Fatalf("step %d: %s error = %v, want %v", i, st.act.desc, err, st.err)
		}
		var got []string
		for _, g := range grants {
			q := r.reqs[g.ID]
			if g.Err == nil && (g.Tenant != q.Tenant || g.Priority != q.Priority || g.Service != max(q.Service, 0)) {
				t.Fatalf("step %d: %s granted %+v for %+v", i, st.act.desc, g, q)
			}
			r.held[g.ID] = g
			got = append(got, fmt.Sprintf("%d%s", g.ID, g.Upstream))
		}
		if !slices.Equal(got, st.want) {
			t.Fatalf("step %d: %s = %v, want %v", i, st.act.desc, got, st.want)
		}
		checkHeaps(t, c)
		checkTenants(t, c)
	}
}

// checkTenants verifies each remembered tenant's counts and heap places
// against the waiters, and the MaxTenants bound on idle ones.
func checkTenants(t *testing.T, c *Core) {
	t.Helper()
	waiting := map[*tenant]int{}
	for _, it := range c.waiting {
		if c.tenants[it.tenant.key] != it.tenant {
			t.Fatalf("waiter %d's tenant %v is not remembered", it.id, it.tenant.key)
		}
		waiting[it.tenant]++
	}
	idle := 0
	for k, tn := range c.tenants {
		switch {
		case tn.key != k || tn.waiting != waiting[tn] || tn.linked != tn.waiting:
			t.Fatalf("tenant %v: waiting %d linked %d, counted %d", k, tn.waiting, tn.linked, waiting[tn])
		case (tn.idx[inBacklog] >= 0) != (tn.waiting > 0):
			t.Fatalf("tenant %v with %d waiting: in backlog %v", k, tn.waiting, tn.idx[inBacklog] >= 0)
		case (tn.idx[inIdle] >= 0) != (c.evicting && tn.waiting == 0 && tn.inflight == 0):
			t.Fatalf("tenant %v (%d waiting, %d in flight): idle %v", k, tn.waiting, tn.inflight, tn.idx[inIdle] >= 0)
		}
		if tn.idx[inIdle] >= 0 {
			idle++
		}
		n := 0
		for _, g := range tn.groups {
			if g.tenant != tn || c.groups[g.key] != g {
				t.Fatalf("tenant %v lists group %v that is not its own or not indexed", k, g.key)
			}
			n += g.fifo.len()
		}
		if n != tn.waiting {
			t.Fatalf("tenant %v: its groups hold %d, want %d", k, n, tn.waiting)
		}
	}
	ids := 0
	for id, tn := range c.byID {
		if tn != nil {
			ids++
			if int(tn.id) != id || c.tenants[tn.key] != tn {
				t.Fatalf("byID[%d] = tenant %v with id %d, not the one remembered", id, tn.key, tn.id)
			}
		}
	}
	if ids != len(c.tenants) {
		t.Fatalf("%d tenants by id, %d by key", ids, len(c.tenants))
	}
	if !c.evicting && len(c.tenants) > c.s.MaxTenants {
		t.Fatalf("%d tenants remembered, MaxTenants %d, and not evicting", len(c.tenants), c.s.MaxTenants)
	}
	if idle != c.idle.len() || idle > c.s.MaxTenants {
		t.Fatalf("%d idle tenants, idle heap %d, MaxTenants %d", idle, c.idle.len(), c.s.MaxTenants)
	}
	for _, l := range c.levels {
		for i := 1; i < l.backlog.len(); i++ {
			if l.backlog.less(i, (i-1)/2) {
				t.Fatalf("backlog heap order broken at %d", i)
			}
		}
	}
}

// seqIDs returns the ids from, from+1, … to.
func seqIDs(from, to uint64) []uint64 {
	var ids []uint64
	for id := from; id <= to; id++ {
		ids = append(ids, id)
	}
	return ids
}

// enqMany enqueues ids of tenant, each of the given service.
func enqMany(tenant string, service int64, ids ...uint64) []tstep {
	var out []tstep
	for _, id := range ids {
		out = append(out, tstep{act: enqT(id, tenant, service)})
	}
	return out
}

// releases releases each id in turn, each granting the next in want.
func releases(ids []uint64, want ...string) []tstep {
	var out []tstep
	for i, id := range ids {
		st := tstep{act: rel(id)}
		if i < len(want) {
			st.want = []string{want[i]}
		}
		out = append(out, st)
	}
	return out
}

func steps(parts ...[]tstep) []tstep { return slices.Concat(parts...) }
