package queue

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// model is a slow, obviously correct reference for Core: waiters in a slice,
// the dispatch order computed by sorting.
type model struct {
	order  Order
	starve time.Duration
	wins   []*mwin // sorted by name, as in Core
	wait   []*item // in arrival order
	seq    uint64
}

// mwin is the model's window; avail is what the Availability func says.
type mwin struct {
	name     string
	limit    int
	inflight int
	removed  bool
	avail    Availability
}

func (w *mwin) state() Availability {
	if w.removed {
		return Down
	}
	return w.avail
}

func (w *mwin) room() int {
	if w.state() != Available || w.inflight >= w.limit {
		return 0
	}
	return w.limit - w.inflight
}

// reachable: some window the waiter may use is not Down.
func (m *model) reachable(exclude []string) bool {
	for _, w := range m.wins {
		if w.state() != Down && !slices.Contains(exclude, w.name) {
			return true
		}
	}
	return false
}

// refuse takes out, oldest first, every waiter whose usable windows are all
// Down, while some window is Down.
func (m *model) refuse() []Grant {
	if !slices.ContainsFunc(m.wins, func(w *mwin) bool { return w.state() == Down }) {
		return nil
	}
	var out []Grant
	m.wait = slices.DeleteFunc(m.wait, func(it *item) bool {
		if m.reachable(it.exclude) {
			return false
		}
		out = append(out, Grant{ID: it.id, Err: ErrUnavailable})
		return true
	})
	return out
}

func (m *model) win(name string) (*mwin, int) {
	for i, w := range m.wins {
		if w.name == name {
			return w, i
		}
	}
	return nil, -1
}

func (m *model) choose(exclude []string) *mwin {
	var best *mwin
	for _, w := range m.wins {
		if w.room() > 0 && !slices.Contains(exclude, w.name) && (best == nil || w.room() > best.room()) {
			best = w
		}
	}
	return best
}

// dispatch grants in priority order: one pass suffices, because room only
// shrinks while it runs.
func (m *model) dispatch(t *testing.T, now time.Time) []Grant {
	t.Helper()
	order := slices.Clone(m.wait)
	if m.order == ShortestFirst {
		aged := func(it *item) bool { return now.Sub(it.arrival) >= m.starve }
		slices.SortStableFunc(order, func(a, b *item) int {
			switch aa, ab := aged(a), aged(b); {
			case aa && ab:
				return cmp.Compare(a.seq, b.seq)
			case aa != ab:
				if aa {
					return -1
				}
				return 1
			}
			return cmp.Or(cmp.Compare(a.tokens, b.tokens), cmp.Compare(a.seq, b.seq))
		})
	}
	if m.order == EarliestDeadline {
		slices.SortStableFunc(order, func(a, b *item) int {
			switch {
			case earlier(a.deadline, b.deadline):
				return -1
			case earlier(b.deadline, a.deadline):
				return 1
			}
			return cmp.Compare(a.seq, b.seq)
		})
	}
	var grants []Grant
	for _, it := range order {
		w := m.choose(it.exclude)
		if w == nil {
			continue
		}
		if w.inflight >= w.limit || w.state() != Available {
			t.Fatalf("model granted on %+v", *w)
		}
		w.inflight++
		grants = append(grants, Grant{ID: it.id, Upstream: w.name, Cost: Cost{Tokens: it.tokens, Seqs: 1}})
		m.wait = slices.DeleteFunc(m.wait, func(x *item) bool { return x == it })
	}
	return append(grants, m.refuse()...)
}

// blocked checks the invariant after every dispatch: no waiter can use a
// window with room. Under ShortestFirst it means no starved waiter is left
// behind while room it may use exists.
func (m *model) blocked(t *testing.T, step int) {
	t.Helper()
	for _, it := range m.wait {
		if w := m.choose(it.exclude); w != nil {
			t.Fatalf("step %d: waiter %d could use %s but waits", step, it.id, w.name)
		}
	}
}

type driver struct {
	t     *testing.T
	r     *rand.Rand
	c     *Core
	m     *model
	now   time.Time
	next  uint64
	held  []string          // one entry per slot held, by upstream
	fate  map[uint64]string // how each request left: granted, cancelled, drained, refused, unavailable
	names []string
	avail map[string]Availability // what the Core's Availability func reads
}

func (d *driver) left(id uint64, how string) {
	if prev, ok := d.fate[id]; ok {
		d.t.Fatalf("request %d left twice: %s then %s", id, prev, how)
	}
	d.fate[id] = how
}

// compare runs the same grants through the model and checks them.
func (d *driver) compare(step int, op string, got, want []Grant) {
	d.t.Helper()
	if !slices.Equal(got, want) {
		d.t.Fatalf("step %d: %s = %v, model %v", step, op, got, want)
	}
	for _, g := range got {
		if g.Err != nil {
			d.left(g.ID, "unavailable")
			continue
		}
		d.left(g.ID, "granted")
		d.held = append(d.held, g.Upstream)
	}
}

func (d *driver) step(i int) {
	t, r, c, m := d.t, d.r, d.c, d.m
	d.now = d.now.Add(time.Duration(r.IntN(3000)) * time.Millisecond)
	var op string
	switch k := r.IntN(100); {
	case k < 45:
		d.next++
		id := d.next
		tokens := int64(r.ExpFloat64() * 300)
		var excl []string
		if r.IntN(8) == 0 {
			excl = []string{d.names[r.IntN(len(d.names))]}
		}
		var deadline time.Time // none, or so far ahead that no prediction refuses it
		if r.IntN(3) > 0 {
			deadline = d.now.Add(24*time.Hour + time.Duration(r.IntN(60))*time.Second)
		}
		op = fmt.Sprintf("Enqueue(%d, %d, %v, deadline %v)", id, tokens, excl, deadline)
		g, ok, err := c.Enqueue(d.now, Request{ID: id, Tokens: tokens, Exclude: excl, Deadline: deadline})
		var want []Grant
		if w := m.choose(excl); w != nil {
			w.inflight++
			want = []Grant{{ID: id, Upstream: w.name, Cost: Cost{Tokens: max(tokens, 0), Seqs: 1}}}
		}
		var got []Grant
		switch {
		case err != nil:
			d.left(id, "refused")
			if want != nil {
				t.Fatalf("step %d: %s = %v, model grants %v", i, op, err, want)
			}
			if unreachable := len(m.wins) > 0 && !m.reachable(excl); unreachable != errors.Is(err, ErrUnavailable) {
				t.Fatalf("step %d: %s = %v, model says every usable window Down: %v", i, op, err, unreachable)
			}
			return
		case ok:
			got = []Grant{g}
		default:
			m.seq++
			m.wait = append(m.wait, &item{id: id, seq: m.seq, tokens: tokens, arrival: d.now, deadline: deadline, exclude: excl})
		}
		d.compare(i, op, got, want)
	case k < 75:
		if len(d.held) == 0 {
			return
		}
		j := r.IntN(len(d.held))
		up := d.held[j]
		d.held = slices.Delete(d.held, j, j+1)
		op = "Release(" + up + ")"
		got := c.Release(d.now, up, Cost{})
		var want []Grant
		if w, wi := m.win(up); w != nil && w.inflight > 0 {
			w.inflight--
			if w.removed && w.inflight == 0 {
				m.wins = slices.Delete(m.wins, wi, wi+1)
			} else {
				want = m.dispatch(t, d.now)
			}
		}
		d.compare(i, op, got, want)
	case k < 85:
		var id uint64
		if len(m.wait) > 0 && r.IntN(4) > 0 {
			id = m.wait[r.IntN(len(m.wait))].id
		} else {
			id = d.next + 1 + uint64(r.IntN(3)) // not waiting
		}
		op = fmt.Sprintf("Cancel(%d)", id)
		n := len(m.wait)
		m.wait = slices.DeleteFunc(m.wait, func(it *item) bool { return it.id == id })
		got, grants := c.Cancel(d.now, id)
		if want := len(m.wait) < n; got != want || len(grants) != 0 {
			t.Fatalf("step %d: %s = %v %v, want %v and no grant (nothing reserves a window here)", i, op, got, grants, want)
		} else if got {
			d.left(id, "cancelled")
		}
	case k < 93:
		name, limit := d.names[r.IntN(len(d.names))], r.IntN(5)
		op = fmt.Sprintf("SetWindow(%s, %d)", name, limit)
		c.SetWindow(name, limit)
		if w, _ := m.win(name); w != nil {
			w.removed = false
			w.limit = limit
		} else {
			m.wins = append(m.wins, &mwin{name: name, limit: limit, avail: d.avail[name]})
			slices.SortFunc(m.wins, func(a, b *mwin) int { return cmp.Compare(a.name, b.name) })
		}
		d.compare(i, op, c.Dispatch(d.now), m.dispatch(t, d.now))
	case k < 97:
		name, a := d.names[r.IntN(len(d.names))], Availability(r.IntN(5)/2) // available 2/5, paused 2/5, down 1/5
		op = fmt.Sprintf("availability(%s) = %v", name, a)
		d.avail[name] = a // the Core reads it through its Availability func
		if w, _ := m.win(name); w != nil {
			w.avail = a
		}
		d.compare(i, op, c.Dispatch(d.now), m.dispatch(t, d.now))
	case k < 98:
		name := d.names[r.IntN(len(d.names))]
		op = "RemoveWindow(" + name + ")"
		c.RemoveWindow(name)
		if w, wi := m.win(name); w != nil && w.inflight == 0 {
			m.wins = slices.Delete(m.wins, wi, wi+1)
		} else if w != nil {
			w.removed, w.limit = true, 0
		}
		d.compare(i, op, c.Dispatch(d.now), m.dispatch(t, d.now))
	case k < 99:
		o := Order(r.IntN(3))
		op = "SetOrder(" + o.String() + ")"
		c.SetOrder(o)
		m.order = o
	default:
		if r.IntN(5) > 0 {
			return
		}
		op = "Drain"
		got := c.Drain(d.now)
		want := make([]uint64, len(m.wait))
		for j, it := range m.wait {
			want[j] = it.id
			d.left(it.id, "drained")
		}
		m.wait = nil
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: Drain() = %v, model %v", i, got, want)
		}
	}
	m.blocked(t, i)
	d.check(i, op)
}

// check compares the Core's snapshot with the model's.
func (d *driver) check(i int, op string) {
	d.t.Helper()
	s := d.c.Stats()
	var tokens int64
	for _, it := range d.m.wait {
		tokens += it.tokens
	}
	if s.Length != len(d.m.wait) || s.Tokens != tokens || len(s.Windows) != len(d.m.wins) {
		d.t.Fatalf("step %d after %s: Stats() = %+v, model %d waiters %d tokens %d windows",
			i, op, s, len(d.m.wait), tokens, len(d.m.wins))
	}
	for j, w := range d.m.wins {
		want := WindowStats{Name: w.name, Limit: w.limit, InFlight: w.inflight, Availability: w.state()}
		got := s.Windows[j]
		got.TokensHeld = 0 // not modelled: no token limit here, and releases give back Cost{}
		if got != want {
			d.t.Fatalf("step %d after %s: window %+v, model %+v", i, op, got, want)
		}
	}
	checkHeaps(d.t, d.c)
}

func TestCoreMatchesModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			settings := Settings{MaxLength: 40, MaxTokens: 6000, StarvationAfter: 5 * time.Second}
			c, err := NewCore(settings)
			if err != nil {
				t.Fatal(err)
			}
			d := &driver{
				t: t, r: rand.New(rand.NewPCG(seed, 42)), c: c,
				m:     &model{starve: settings.StarvationAfter},
				now:   t0,
				fate:  make(map[uint64]string),
				names: []string{"a", "b", "c"},
				avail: map[string]Availability{},
			}
			c.SetAvailability(func(name string) Availability { return d.avail[name] })
			for i := range 3000 {
				d.step(i)
			}
			for _, id := range c.Drain(d.now) {
				d.left(id, "drained")
			}
			counts := map[string]int{}
			for _, f := range d.fate {
				counts[f]++
			}
			if counts["granted"] == 0 || counts["cancelled"] == 0 || counts["refused"] == 0 || counts["unavailable"] == 0 {
				t.Errorf("fates %v: the driver misses a way out", counts)
			}
			for id := uint64(1); id <= d.next; id++ {
				if _, ok := d.fate[id]; !ok {
					t.Errorf("request %d never left", id)
				}
			}
		})
	}
}
