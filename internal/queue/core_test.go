package queue

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// action is one call on a Core; it returns the grants the call made.
type action struct {
	desc string
	run  func(c *Core, now time.Time) ([]Grant, error)
}

func enqueue(id uint64, tokens int64, exclude ...string) action {
	return action{fmt.Sprintf("Enqueue(%d, %d tokens, exclude %v)", id, tokens, exclude),
		func(c *Core, now time.Time) ([]Grant, error) {
			g, ok, err := c.Enqueue(now, Request{ID: id, Tokens: tokens, Exclude: exclude})
			if ok {
				return []Grant{g}, err
			}
			return nil, err
		}}
}

func enqueueP(id uint64, tokens int64, priority int) action {
	return action{fmt.Sprintf("Enqueue(%d, %d tokens, priority %d)", id, tokens, priority),
		func(c *Core, now time.Time) ([]Grant, error) {
			g, ok, err := c.Enqueue(now, Request{ID: id, Tokens: tokens, Priority: priority})
			if ok {
				return []Grant{g}, err
			}
			return nil, err
		}}
}

func setWindowOrder(name string, o Order) action {
	return action{fmt.Sprintf("SetWindowOrder(%s, %v)", name, o), func(c *Core, now time.Time) ([]Grant, error) {
		c.SetWindowOrder(name, o)
		return c.Dispatch(now), nil
	}}
}

func take(id uint64, exclude ...string) action {
	return action{fmt.Sprintf("Take(%d, exclude %v)", id, exclude), func(c *Core, now time.Time) ([]Grant, error) {
		if g, ok := c.take(now, Request{ID: id, Exclude: exclude}); ok {
			return []Grant{g}, nil
		}
		return nil, nil
	}}
}

func release(up string) action {
	return action{"Release(" + up + ")", func(c *Core, now time.Time) ([]Grant, error) {
		return c.Release(now, up, Cost{}), nil
	}}
}

func cancel(id uint64, want bool) action {
	return action{fmt.Sprintf("Cancel(%d)", id), func(c *Core, now time.Time) ([]Grant, error) {
		got, grants := c.Cancel(now, id)
		if got != want {
			return nil, fmt.Errorf("Cancel(%d) = %v, want %v", id, got, want)
		}
		return grants, nil
	}}
}

// setWindow, setAvailable, removeWindow and setOrder dispatch after the
// change, as the contract asks.
func setWindow(name string, limit int) action {
	return action{fmt.Sprintf("SetWindow(%s, %d)", name, limit), func(c *Core, now time.Time) ([]Grant, error) {
		c.SetWindow(name, limit)
		return c.Dispatch(now), nil
	}}
}

// setWindowOnly changes the window without dispatching.
func setWindowOnly(name string, limit int) action {
	return action{fmt.Sprintf("SetWindow(%s, %d) alone", name, limit), func(c *Core, _ time.Time) ([]Grant, error) {
		c.SetWindow(name, limit)
		return nil, nil
	}}
}

// setAvail makes the Core's Availability func say a for name from now on.
func setAvail(name string, a Availability) action {
	return action{fmt.Sprintf("availability(%s) = %v", name, a), func(c *Core, now time.Time) ([]Grant, error) {
		prev := c.avail
		c.SetAvailability(func(n string) Availability {
			switch {
			case n == name:
				return a
			case prev != nil:
				return prev(n)
			}
			return Available
		})
		return c.Dispatch(now), nil
	}}
}

func removeWindow(name string) action {
	return action{"RemoveWindow(" + name + ")", func(c *Core, now time.Time) ([]Grant, error) {
		c.RemoveWindow(name)
		return c.Dispatch(now), nil
	}}
}

func setOrder(o Order) action {
	return action{"SetOrder(" + o.String() + ")", func(c *Core, now time.Time) ([]Grant, error) {
		c.SetOrder(o)
		return c.Dispatch(now), nil
	}}
}

func dispatch() action {
	return action{"Dispatch", func(c *Core, now time.Time) ([]Grant, error) { return c.Dispatch(now), nil }}
}

func drain(want ...uint64) action {
	return action{"Drain", func(c *Core, now time.Time) ([]Grant, error) {
		if got := c.Drain(now); !slices.Equal(got, want) {
			return nil, fmt.Errorf("Drain() = %v, want %v", got, want)
		}
		return nil, nil
	}}
}

// windows checks the Stats of every window, written "name:limit/inflight"
// with a trailing "!" for Down and "~" for Paused, and the queue length.
func stats(length int, wins ...string) action {
	return action{"Stats", func(c *Core, _ time.Time) ([]Grant, error) {
		s := c.Stats()
		var got []string
		for _, w := range s.Windows {
			d := fmt.Sprintf("%s:%d/%d", w.Name, w.Limit, w.InFlight)
			switch w.Availability {
			case Down:
				d += "!"
			case Paused:
				d += "~"
			}
			got = append(got, d)
		}
		if s.Length != length || !slices.Equal(got, wins) {
			return nil, fmt.Errorf("Stats() = length %d windows %v, want %d %v", s.Length, got, length, wins)
		}
		return nil, nil
	}}
}

type step struct {
	at   time.Duration // clock, from t0
	act  action
	want []Grant
	err  error
}

func g(id uint64, up string) Grant { return Grant{ID: id, Upstream: up} }

func refused(id uint64) Grant { return Grant{ID: id, Err: ErrUnavailable} }

func TestCoreSteps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		settings Settings
		steps    []step
	}{
		{name: "fifo", steps: []step{
			{act: setWindow("a", 1)},
			{act: enqueue(1, 500), want: []Grant{g(1, "a")}},
			{act: enqueue(2, 900)},
			{act: enqueue(3, 10)},
			{act: release("a"), want: []Grant{g(2, "a")}},
			{act: release("a"), want: []Grant{g(3, "a")}},
			{act: release("a")},
			{act: stats(0, "a:1/0")},
		}},
		{name: "newcomer waits behind waiters", steps: []step{
			{act: setWindow("a", 1)},
			{act: enqueue(1, 1), want: []Grant{g(1, "a")}},
			{act: enqueue(2, 1)},
			{act: setWindow("a", 2), want: []Grant{g(2, "a")}},
			{act: enqueue(3, 1)},
			{act: release("a"), want: []Grant{g(3, "a")}},
		}},
		{name: "shortest first", steps: []step{
			{act: setWindow("a", 1)},
			{act: setOrder(ShortestFirst)},
			{act: enqueue(1, 100), want: []Grant{g(1, "a")}},
			{act: enqueue(2, 900)},
			{act: enqueue(3, 50)},
			{act: enqueue(4, 50)},
			{act: enqueue(5, 10)},
			{act: release("a"), want: []Grant{g(5, "a")}},
			{act: release("a"), want: []Grant{g(3, "a")}},
			{act: release("a"), want: []Grant{g(4, "a")}},
			{act: release("a"), want: []Grant{g(2, "a")}},
		}},
		{name: "aging puts the starved first, oldest first", settings: Settings{StarvationAfter: 10 * time.Second}, steps: []step{
			{act: setWindow("a", 1)},
			{act: setOrder(ShortestFirst)},
			{act: enqueue(1, 1), want: []Grant{g(1, "a")}},
			{act: enqueue(2, 900)},
			{at: time.Second, act: enqueue(3, 800)},
			{at: 2 * time.Second, act: enqueue(4, 5)},
			{at: 9 * time.Second, act: release("a"), want: []Grant{g(4, "a")}},
			{at: 9 * time.Second, act: enqueue(5, 5)},
			{at: 11 * time.Second, act: release("a"), want: []Grant{g(2, "a")}},
			{at: 11 * time.Second, act: release("a"), want: []Grant{g(3, "a")}},
			{at: 11 * time.Second, act: release("a"), want: []Grant{g(5, "a")}},
		}},
		{name: "switching order keeps everyone", steps: []step{
			{act: setWindow("a", 1)},
			{act: enqueue(1, 1), want: []Grant{g(1, "a")}},
			{act: enqueue(2, 30)},
			{act: enqueue(3, 20)},
			{act: enqueue(4, 10)},
			{act: setOrder(ShortestFirst)},
			{act: release("a"), want: []Grant{g(4, "a")}},
			{act: setOrder(FIFO)},
			{act: release("a"), want: []Grant{g(2, "a")}},
			{act: setOrder(ShortestFirst)},
			{act: setWindow("a", 3), want: []Grant{g(3, "a")}},
			{act: stats(0, "a:3/2")},
		}},
		{name: "most free room, ties by name", steps: []step{
			{act: setWindow("b", 2)},
			{act: setWindow("a", 2)},
			{act: setWindow("c", 3)},
			{act: enqueue(1, 1), want: []Grant{g(1, "c")}},
			{act: enqueue(2, 1), want: []Grant{g(2, "a")}},
			{act: enqueue(3, 1), want: []Grant{g(3, "b")}},
			{act: enqueue(4, 1), want: []Grant{g(4, "c")}},
			{act: stats(0, "a:2/1", "b:2/1", "c:3/2")},
		}},
		{name: "exclude", steps: []step{
			{act: setWindow("a", 1)},
			{act: setWindow("b", 1)},
			{act: enqueue(1, 1, "a"), want: []Grant{g(1, "b")}},
			{act: enqueue(2, 1, "a")},
			{act: enqueue(3, 1), want: []Grant{g(3, "a")}},
			{act: enqueue(4, 1)},
			{act: enqueue(5, 1, "b")},
			{act: release("a"), want: []Grant{g(4, "a")}},
			{act: release("a"), want: []Grant{g(5, "a")}},
			{act: release("b"), want: []Grant{g(2, "b")}},
		}},
		{name: "a higher priority never waits behind a lower one, in either order, aged or not", steps: []step{
			{act: setWindow("a", 1)},
			{act: enqueueP(1, 10, 0), want: []Grant{g(1, "a")}},
			{at: 0, act: enqueueP(2, 10, -1)},                // batch, old
			{at: time.Second, act: enqueueP(3, 5, -1)},       // batch, short
			{at: 2 * time.Second, act: enqueueP(4, 900, 10)}, // interactive, long and new
			{at: 20 * time.Second, act: release("a"), want: []Grant{g(4, "a")}},
			{at: 20 * time.Second, act: setOrder(ShortestFirst)},
			{at: 21 * time.Second, act: release("a"), want: []Grant{g(2, "a")}}, // aged within its priority
			{at: 21 * time.Second, act: release("a"), want: []Grant{g(3, "a")}},
		}},
		{name: "each pool of windows has its own order", steps: []step{
			{act: setWindow("a", 1)},
			{act: setWindow("b", 1)},
			{act: enqueue(1, 1, "b"), want: []Grant{g(1, "a")}},
			{act: enqueue(2, 1, "a"), want: []Grant{g(2, "b")}},
			{at: time.Second, act: enqueue(3, 900, "b")}, // pool a: long, then short
			{at: 2 * time.Second, act: enqueue(4, 10, "b")},
			{at: time.Second, act: enqueue(5, 900, "a")}, // pool b: long, then short
			{at: 2 * time.Second, act: enqueue(6, 10, "a")},
			{at: 2 * time.Second, act: setWindowOrder("a", ShortestFirst)}, // only pool a is under pressure
			{at: 3 * time.Second, act: stats(4, "a:1/1", "b:1/1")},
			{at: 3 * time.Second, act: release("a"), want: []Grant{g(4, "a")}}, // shortest first
			{at: 3 * time.Second, act: release("b"), want: []Grant{g(5, "b")}}, // by arrival
			{at: 3 * time.Second, act: release("a"), want: []Grant{g(3, "a")}},
			{at: 3 * time.Second, act: release("b"), want: []Grant{g(6, "b")}},
		}},
		{name: "take grants only room that exists now, and never queues", steps: []step{
			{act: setWindow("a", 1)},
			{act: setWindow("b", 1)},
			{act: enqueue(1, 1), want: []Grant{g(1, "a")}},
			{act: take(2, "b")},
			{act: take(3, "a"), want: []Grant{g(3, "b")}},
			{act: take(4)},
			{act: stats(0, "a:1/1", "b:1/1")},
			{act: setAvail("a", Paused)},
			{act: release("b")},
			{act: take(5, "b")},
		}},
		{name: "a request that excludes every window is refused at once", steps: []step{
			{act: setWindow("a", 1)},
			{act: enqueue(1, 1), want: []Grant{g(1, "a")}},
			{act: enqueue(2, 1, "a"), err: ErrUnavailable},
			{act: enqueue(3, 1)},
			{act: release("a"), want: []Grant{g(3, "a")}},
		}},
		{name: "a waiter that excludes the windows with room holds no one back", steps: []step{
			{act: setWindow("a", 1)},
			{act: setWindow("b", 1)},
			{act: enqueue(1, 1), want: []Grant{g(1, "a")}},
			{act: enqueue(2, 1), want: []Grant{g(2, "b")}},
			{act: enqueue(3, 1, "a")},
			{act: enqueue(4, 1)},
			{act: release("a"), want: []Grant{g(4, "a")}},
			{act: release("b"), want: []Grant{g(3, "b")}},
		}},
		{name: "cut below in-flight waits until in-flight falls under the limit", steps: []step{
			{act: setWindow("a", 3)},
			{act: enqueue(1, 1), want: []Grant{g(1, "a")}},
			{act: enqueue(2, 1), want: []Grant{g(2, "a")}},
			{act: enqueue(3, 1), want: []Grant{g(3, "a")}},
			{act: setWindow("a", 1)},
			{act: enqueue(4, 1)},
			{act: stats(1, "a:1/3")},
			{act: release("a")},
			{act: release("a")},
			{act: release("a"), want: []Grant{g(4, "a")}},
			{act: stats(0, "a:1/1")},
		}},
		{name: "unavailable window takes nothing", steps: []step{
			{act: setWindow("a", 2)},
			{act: setWindow("b", 1)},
			{act: setAvail("a", Down)},
			{act: enqueue(1, 1), want: []Grant{g(1, "b")}},
			{act: enqueue(2, 1)},
			{act: stats(1, "a:2/0!", "b:1/1")},
			{act: setAvail("a", Available), want: []Grant{g(2, "a")}},
			{act: setAvail("nope", Available)},
		}},
		{name: "a paused window keeps its waiters; down refuses them at once", steps: []step{
			{act: setWindow("a", 1)},
			{act: setAvail("a", Paused)},
			{act: enqueue(1, 1)},
			{act: enqueue(2, 1)},
			{act: stats(2, "a:1/0~")},
			{act: setAvail("a", Down), want: []Grant{refused(1), refused(2)}},
			{act: stats(0, "a:1/0!")},
			{act: enqueue(3, 1), err: ErrUnavailable},
			{act: setAvail("a", Available)},
			{act: enqueue(4, 1), want: []Grant{g(4, "a")}},
		}},
		{name: "down refuses only waiters that no other window can take", steps: []step{
			{act: setWindow("a", 1)},
			{act: setWindow("b", 1)},
			{act: enqueue(1, 1), want: []Grant{g(1, "a")}},
			{act: enqueue(2, 1), want: []Grant{g(2, "b")}},
			{act: enqueue(3, 1)},
			{act: enqueue(4, 1, "a")},
			{act: setAvail("b", Down), want: []Grant{refused(4)}},
			{act: stats(1, "a:1/1", "b:1/1!")},
			{act: release("a"), want: []Grant{g(3, "a")}},
		}},
		{name: "remove window keeps its slots counted until released", steps: []step{
			{act: setWindow("a", 1)},
			{act: enqueue(1, 1), want: []Grant{g(1, "a")}},
			{act: removeWindow("a")},
			{act: stats(0, "a:0/1!")},
			{act: enqueue(2, 1), err: ErrUnavailable}, // a removed window is Down
			{act: release("a")},
			{act: stats(0)},
			{act: release("a")},
			{act: setWindow("a", 1)},
			{act: enqueue(3, 1), want: []Grant{g(3, "a")}},
			{act: removeWindow("a")},
			{act: setWindow("a", 2)},
			{act: stats(0, "a:2/1")},
		}},
		{name: "length bound", settings: Settings{MaxLength: 2}, steps: []step{
			{act: enqueue(1, 1)},
			{act: enqueue(2, 1)},
			{act: enqueue(3, 1), err: ErrFull},
			{act: cancel(1, true)},
			{act: enqueue(3, 1)},
			{act: stats(2)},
		}},
		{name: "tokens bound", settings: Settings{MaxTokens: 100}, steps: []step{
			{act: enqueue(1, 101), err: ErrTooLarge},
			{act: enqueue(2, 60)},
			{act: enqueue(3, 41), err: ErrTokensFull},
			{act: enqueue(4, 40)},
			{act: enqueue(5, -5)},
			{act: setWindow("a", 1), want: []Grant{g(2, "a")}},
			{act: enqueue(6, 60)},
			{act: enqueue(7, 101), err: ErrTooLarge},
		}},
		{name: "too large is refused even with room", settings: Settings{MaxTokens: 100}, steps: []step{
			{act: setWindow("a", 1)},
			{act: enqueue(1, 101), err: ErrTooLarge},
			{act: stats(0, "a:1/0")},
		}},
		{name: "window changes take effect at Dispatch", steps: []step{
			{act: enqueue(1, 1)},
			{act: enqueue(2, 1)},
			{act: setWindowOnly("a", 1)},
			{act: stats(2, "a:1/0")},
			{act: dispatch(), want: []Grant{g(1, "a")}},
			{act: dispatch()},
		}},
		{name: "cancel", steps: []step{
			{act: enqueue(1, 1)},
			{act: enqueue(2, 1)},
			{act: enqueue(2, 1), err: ErrDuplicateID},
			{act: cancel(1, true)},
			{act: cancel(1, false)},
			{act: cancel(99, false)},
			{act: setWindow("a", 5), want: []Grant{g(2, "a")}},
			{act: cancel(2, false)},
		}},
		{name: "release of an unknown or idle window is a no-op", steps: []step{
			{act: release("ghost")},
			{act: setWindow("a", 1)},
			{act: release("a")},
			{act: stats(0, "a:1/0")},
		}},
		{name: "drain", steps: []step{
			{act: setOrder(ShortestFirst)},
			{act: enqueue(3, 9)},
			{act: enqueue(1, 1)},
			{act: enqueue(2, 5)},
			{act: drain(3, 1, 2)},
			{act: drain()},
			{act: setWindow("a", 1)},
			{act: enqueue(4, 1), want: []Grant{g(4, "a")}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := NewCore(tt.settings)
			if err != nil {
				t.Fatalf("NewCore() = %v", err)
			}
			for i, st := range tt.steps {
				got, err := st.act.run(c, t0.Add(st.at))
				if !errors.Is(err, st.err) || (st.err == nil && err != nil) {
					t.Fatalf("step %d: %s error = %v, want %v", i, st.act.desc, err, st.err)
				}
				for i := range got { // costs are checked in memory_test.go, tenants in tenant_test.go
					got[i].Cost, got[i].Tenant, got[i].Priority, got[i].Service = Cost{}, "", 0, 0
				}
				if !slices.Equal(got, st.want) {
					t.Fatalf("step %d: %s = %v, want %v", i, st.act.desc, got, st.want)
				}
				checkHeaps(t, c)
			}
		})
	}
}

// checkHeaps verifies the heap property, the index tracking and that the
// heaps and the index hold the same waiters: all of them in the one heap,
// each once in its group's two.
func checkHeaps(t *testing.T, c *Core) {
	t.Helper()
	check := func(h *heap, want int) {
		if h.len() != want {
			t.Fatalf("heap %d holds %d, want %d", h.kind, h.len(), want)
		}
		for i, it := range h.items {
			if it.idx[h.kind] != i || c.waiting[it.id] != it {
				t.Fatalf("heap %d: item %d at %d has idx %d", h.kind, it.id, i, it.idx[h.kind])
			}
			if i > 0 && h.less(i, (i-1)/2) {
				t.Fatalf("heap %d: order broken at %d", h.kind, i)
			}
		}
	}
	check(&c.fifo, len(c.waiting))
	var tokens int64
	for _, it := range c.fifo.items {
		tokens += it.tokens
	}
	inGroups := 0
	for k, g := range c.groups {
		if g.fifo.len() == 0 || g.key != k {
			t.Fatalf("group %q: empty or misfiled", k)
		}
		check(&g.fifo, g.fifo.len())
		check(&g.size, g.fifo.len())
		check(&g.deadline, g.fifo.len())
		for _, it := range g.fifo.items {
			if it.group != g {
				t.Fatalf("item %d in group %q points to another", it.id, k)
			}
		}
		inGroups += g.fifo.len()
	}
	if inGroups != len(c.waiting) || tokens != c.tokens {
		t.Fatalf("groups hold %d of %d waiters; tokens %d, counted %d", inGroups, len(c.waiting), tokens, c.tokens)
	}
}

func TestSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		s     Settings
		want  Settings
		field []string
	}{
		{name: "zero", want: Settings{MaxLength: 1024, MaxTokens: 4_000_000, StarvationAfter: 10 * time.Second}},
		{name: "set", s: Settings{MaxLength: 5, MaxTokens: 7, StarvationAfter: time.Second},
			want: Settings{MaxLength: 5, MaxTokens: 7, StarvationAfter: time.Second}},
		{name: "negative", s: Settings{MaxLength: -1, MaxTokens: -1, StarvationAfter: -1},
			field: []string{"MaxLength", "MaxTokens", "StarvationAfter"}},
		{name: "one bad", s: Settings{MaxTokens: -3}, field: []string{"MaxTokens"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.s.withDefaults()
			if _, qerr := New(tt.s); (qerr == nil) != (err == nil) {
				t.Fatalf("New() = %v, withDefaults() = %v", qerr, err)
			}
			if len(tt.field) > 0 {
				if err == nil {
					t.Fatalf("withDefaults(%+v) = nil error, want one naming %v", tt.s, tt.field)
				}
				for _, f := range tt.field {
					if !strings.Contains(err.Error(), "queue: "+f) {
						t.Errorf("withDefaults() = %q, want it to name %s", err, f)
					}
				}
				return
			}
			if err != nil || got.Now == nil {
				t.Fatalf("withDefaults() = %v, Now nil: %v", err, got.Now == nil)
			}
			if got.MaxLength != tt.want.MaxLength || got.MaxTokens != tt.want.MaxTokens || got.StarvationAfter != tt.want.StarvationAfter {
				t.Errorf("withDefaults() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestUpdateSettingsKeepsWaiters(t *testing.T) {
	t.Parallel()
	c, _ := NewCore(Settings{MaxLength: 3})
	for id := range uint64(3) {
		c.Enqueue(t0, Request{ID: id, Tokens: 10})
	}
	if err := c.updateSettings(Settings{MaxLength: 1, MaxTokens: 5}); err != nil {
		t.Fatalf("UpdateSettings() = %v", err)
	}
	if c.Len() != 3 {
		t.Fatalf("Len() = %d after lowering bounds, want 3", c.Len())
	}
	if _, _, err := c.Enqueue(t0, Request{ID: 9, Tokens: 1}); !errors.Is(err, ErrFull) {
		t.Fatalf("Enqueue() = %v, want ErrFull", err)
	}
	if err := c.updateSettings(Settings{MaxLength: -1}); err == nil {
		t.Fatal("UpdateSettings(MaxLength -1) = nil, want an error")
	}
}

func TestOrderString(t *testing.T) {
	t.Parallel()
	for o, want := range map[Order]string{FIFO: "fifo", ShortestFirst: "shortest_first", 7: "Order(7)"} {
		if got := o.String(); got != want {
			t.Errorf("Order(%d).String() = %q, want %q", int(o), got, want)
		}
	}
}
