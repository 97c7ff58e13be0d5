package queue

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

func enqueueM(id uint64, memory int64, exclude ...string) action {
	return action{fmt.Sprintf("Enqueue(%d, memory %d, exclude %v)", id, memory, exclude),
		func(c *Core, now time.Time) ([]Grant, error) {
			g, ok, err := c.Enqueue(now, Request{ID: id, Tokens: 1, Memory: memory, Exclude: exclude})
			if ok {
				return []Grant{g}, err
			}
			return nil, err
		}}
}

func releaseM(up string, memory int64) action {
	return action{fmt.Sprintf("Release(%s, memory %d)", up, memory), func(c *Core, now time.Time) ([]Grant, error) {
		return c.Release(now, up, Cost{Tokens: 1, Memory: memory}), nil
	}}
}

func setBudget(name string, budget int64) action {
	return action{fmt.Sprintf("SetMemoryBudget(%s, %d)", name, budget), func(c *Core, now time.Time) ([]Grant, error) {
		c.SetMemoryBudget(name, budget)
		return c.Dispatch(now), nil
	}}
}

// held checks a window's memory budget and what its in-flight requests hold.
func held(name string, budget, want int64) action {
	return action{fmt.Sprintf("held(%s)", name), func(c *Core, _ time.Time) ([]Grant, error) {
		i := slices.IndexFunc(c.Stats().Windows, func(w WindowStats) bool { return w.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("no window %s", name)
		}
		w := c.Stats().Windows[i]
		if w.MemoryBudget != budget || w.MemoryHeld != want {
			return nil, fmt.Errorf("window %s: budget %d held %d, want %d and %d", name, w.MemoryBudget, w.MemoryHeld, budget, want)
		}
		return nil, nil
	}}
}

func gm(id uint64, up string, memory int64) Grant {
	return Grant{ID: id, Upstream: up, Cost: Cost{Tokens: 1, Memory: memory, Seqs: 1}}
}

func TestCoreMemoryBudget(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "no budget counts requests only", steps: []step{
			{act: setWindow("a", 2)},
			{act: enqueueM(1, 1000), want: []Grant{gm(1, "a", 1000)}},
			{act: enqueueM(2, 1000), want: []Grant{gm(2, "a", 1000)}},
			{act: enqueueM(3, 1)},
			{act: held("a", 0, 2000)},
			{act: releaseM("a", 1000), want: []Grant{gm(3, "a", 1)}},
		}},
		{name: "budget holds back what does not fit", steps: []step{
			{act: setWindow("a", 10)},
			{act: setBudget("a", 100)},
			{act: enqueueM(1, 60), want: []Grant{gm(1, "a", 60)}},
			{act: enqueueM(2, 40), want: []Grant{gm(2, "a", 40)}},
			{act: enqueueM(3, 10)}, // 100 held: waits although the window has room
			{act: held("a", 100, 100)},
			{act: releaseM("a", 40), want: []Grant{gm(3, "a", 10)}},
			{act: held("a", 100, 70)},
		}},
		{name: "a large waiter is not overtaken by small ones", steps: []step{
			{act: setWindow("a", 10)},
			{act: setBudget("a", 100)},
			{act: enqueueM(1, 50), want: []Grant{gm(1, "a", 50)}},
			{act: enqueueM(2, 80)}, // fits the budget, not now
			{act: enqueueM(3, 10)}, // would fit now; waits behind 2
			{act: dispatch()},
			{act: releaseM("a", 50), want: []Grant{gm(2, "a", 80), gm(3, "a", 10)}},
		}},
		{name: "more than the whole budget is refused at once", steps: []step{
			{act: setWindow("a", 10)},
			{act: setBudget("a", 100)},
			{act: enqueueM(1, 101), err: ErrNoMemory},
			{act: stats(0, "a:10/0")},
		}},
		{name: "another pod without a budget takes it", steps: []step{
			{act: setWindow("a", 10)},
			{act: setWindow("b", 1)},
			{act: setBudget("a", 100)},
			{act: enqueueM(1, 500), want: []Grant{gm(1, "b", 500)}},
			{act: enqueueM(2, 500)},
			{act: enqueueM(3, 500, "b"), err: ErrNoMemory},
		}},
		{name: "a waiter above a budget that shrank does not block others", steps: []step{
			{act: setWindow("a", 1)},
			{act: enqueueM(1, 10), want: []Grant{gm(1, "a", 10)}},
			{act: enqueueM(2, 90)},
			{act: enqueueM(3, 5)},
			{act: setBudget("a", 50)},
			{act: releaseM("a", 10), want: []Grant{gm(3, "a", 5)}},
			{act: setBudget("a", 100)},
			{act: releaseM("a", 5), want: []Grant{gm(2, "a", 90)}},
		}},
		{name: "a budget growing starts waiters", steps: []step{
			{act: setWindow("a", 10)},
			{act: setBudget("a", 10)},
			{act: enqueueM(1, 10), want: []Grant{gm(1, "a", 10)}},
			{act: enqueueM(2, 10)},
			{act: setBudget("a", 20), want: []Grant{gm(2, "a", 10)}},
			{act: setBudget("a", 0)},
			{act: enqueueM(3, 1000), want: []Grant{gm(3, "a", 1000)}},
			{act: releaseM("a", 10)},
			{act: releaseM("a", 10)},
			{act: releaseM("a", 1000)},
			{act: held("a", 0, 0)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runCostSteps(t, tt.steps)
		})
	}
}

// TestQueueSlotGivesMemoryBack: a Slot's Release returns its request's
// memory, so the budget frees as requests end.
func TestQueueSlotGivesMemoryBack(t *testing.T) {
	t.Parallel()
	q, err := New(Settings{})
	if err != nil {
		t.Fatal(err)
	}
	q.SetWindow("a", 10)
	q.SetMemoryBudget("a", 100)
	s1 := q.TryAcquire(Request{Memory: 70})
	if s1 == nil {
		t.Fatal("TryAcquire(70) = nil, want a slot")
	}
	if s := q.TryAcquire(Request{Memory: 40}); s != nil {
		t.Fatal("TryAcquire(40) with 70 of 100 held = slot, want nil")
	}
	s1.Release()
	s2 := q.TryAcquire(Request{Memory: 40})
	if s2 == nil {
		t.Fatal("TryAcquire(40) after the release = nil, want a slot")
	}
	if w := q.Stats().Windows[0]; w.MemoryHeld != 40 {
		t.Fatalf("held %d, want 40", w.MemoryHeld)
	}
	s2.Release()
}

func releaseT(up string, tokens int64) action {
	return action{fmt.Sprintf("Release(%s, %d tokens)", up, tokens), func(c *Core, now time.Time) ([]Grant, error) {
		return c.Release(now, up, Cost{Tokens: tokens}), nil
	}}
}

func setTokenLimit(name string, limit int64) action {
	return action{fmt.Sprintf("SetTokenLimit(%s, %d)", name, limit), func(c *Core, now time.Time) ([]Grant, error) {
		c.SetTokenLimit(name, limit)
		return c.Dispatch(now), nil
	}}
}

func gt(id uint64, up string, tokens int64) Grant {
	return Grant{ID: id, Upstream: up, Cost: Cost{Tokens: tokens, Seqs: 1}}
}

func TestCoreTokenLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "the limit holds back a long prompt, not the count", steps: []step{
			{act: setWindow("a", 10)},
			{act: setTokenLimit("a", 1000)},
			{act: enqueue(1, 600), want: []Grant{gt(1, "a", 600)}},
			{act: enqueue(2, 300), want: []Grant{gt(2, "a", 300)}},
			{act: enqueue(3, 500)}, // 900 in flight: waits
			{act: enqueue(4, 50)},  // fits, but 3 reserved the window
			{act: releaseT("a", 600), want: []Grant{gt(3, "a", 500), gt(4, "a", 50)}},
		}},
		{name: "larger than the whole limit runs alone", steps: []step{
			{act: setWindow("a", 10)},
			{act: setTokenLimit("a", 100)},
			{act: enqueue(1, 50), want: []Grant{gt(1, "a", 50)}},
			{act: enqueue(2, 5000)},
			{act: releaseT("a", 50), want: []Grant{gt(2, "a", 5000)}},
			{act: enqueue(3, 1)},
			{act: releaseT("a", 5000), want: []Grant{gt(3, "a", 1)}},
		}},
		{name: "a cut limit holds new work until enough ends", steps: []step{
			{act: setWindow("a", 10)},
			{act: enqueue(1, 400), want: []Grant{gt(1, "a", 400)}},
			{act: enqueue(2, 400), want: []Grant{gt(2, "a", 400)}},
			{act: setTokenLimit("a", 500)},
			{act: enqueue(3, 100)},
			{act: releaseT("a", 400), want: []Grant{gt(3, "a", 100)}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runCostSteps(t, tt.steps)
		})
	}
}

// runCostSteps runs steps on a fresh Core, comparing grants with their costs.
func runCostSteps(t *testing.T, steps []step) {
	t.Helper()
	c, err := NewCore(Settings{})
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range steps {
		got, err := st.act.run(c, t0.Add(st.at))
		if !errors.Is(err, st.err) {
			t.Fatalf("step %d: %s error = %v, want %v", i, st.act.desc, err, st.err)
		}
		if !slices.Equal(got, st.want) {
			t.Fatalf("step %d: %s = %v, want %v", i, st.act.desc, got, st.want)
		}
		checkHeaps(t, c)
	}
}
