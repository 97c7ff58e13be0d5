package queue

import (
	"fmt"
	"testing"
	"time"
)

func enqueueS(id uint64, seqs int) action {
	return action{fmt.Sprintf("Enqueue(%d, %d seqs)", id, seqs), func(c *Core, now time.Time) ([]Grant, error) {
		g, ok, err := c.Enqueue(now, Request{ID: id, Tokens: 1, Seqs: seqs})
		if !ok {
			return nil, err
		}
		return []Grant{g}, err
	}}
}

func releaseS(up string, seqs int) action {
	return action{fmt.Sprintf("Release(%s, %d seqs)", up, seqs), func(c *Core, now time.Time) ([]Grant, error) {
		return c.Release(now, up, Cost{Tokens: 1, Seqs: seqs}), nil
	}}
}

func gs(id uint64, up string, seqs int) Grant {
	return Grant{ID: id, Upstream: up, Cost: Cost{Tokens: 1, Seqs: seqs}}
}

// A request with n > 1 runs n sequences on the pod (vLLM's max_num_seqs
// counts them): it takes n slots of the window, waits while fewer are free
// without being overtaken, and runs alone when it needs more than the whole
// window.
func TestCoreSequences(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "n slots each", steps: []step{
			{act: setWindow("a", 8)},
			{act: enqueueS(1, 4), want: []Grant{gs(1, "a", 4)}},
			{act: enqueueS(2, 3), want: []Grant{gs(2, "a", 3)}},
			{act: enqueueS(3, 2)}, // 7 of 8 held: waits
			{act: enqueueS(4, 1)}, // fits, but 3 reserved the window
			{act: releaseS("a", 3), want: []Grant{gs(3, "a", 2), gs(4, "a", 1)}},
		}},
		{name: "below 1 counts as 1", steps: []step{
			{act: setWindow("a", 2)},
			{act: enqueueS(1, 0), want: []Grant{gs(1, "a", 1)}},
			{act: enqueueS(2, -3), want: []Grant{gs(2, "a", 1)}},
			{act: enqueueS(3, 1)},
			{act: releaseS("a", 0), want: []Grant{gs(3, "a", 1)}},
		}},
		{name: "more than the whole window runs alone", steps: []step{
			{act: setWindow("a", 4)},
			{act: enqueueS(1, 1), want: []Grant{gs(1, "a", 1)}},
			{act: enqueueS(2, 16)},
			{act: releaseS("a", 1), want: []Grant{gs(2, "a", 16)}},
			{act: enqueueS(3, 1)}, // 16 held over a limit of 4: waits
			{act: releaseS("a", 16), want: []Grant{gs(3, "a", 1)}},
		}},
		{name: "a waiter that reserved the window leaves: those behind it start", steps: []step{
			{act: setWindow("a", 8)},
			{act: enqueueS(1, 6), want: []Grant{gs(1, "a", 6)}},
			{act: enqueueS(2, 4)}, // 6 of 8 held: waits, reserving the window
			{act: enqueueS(3, 2)}, // fits, but 2 reserved the window
			{act: cancel(2, true), want: []Grant{gs(3, "a", 2)}},
			{act: enqueueS(4, 1)}, // 8 of 8 held
		}},
		{name: "a cut window holds new work until enough ends", steps: []step{
			{act: setWindow("a", 8)},
			{act: enqueueS(1, 4), want: []Grant{gs(1, "a", 4)}},
			{act: enqueueS(2, 4), want: []Grant{gs(2, "a", 4)}},
			{act: setWindow("a", 6)},
			{act: enqueueS(3, 2)},
			{act: releaseS("a", 4), want: []Grant{gs(3, "a", 2)}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runCostSteps(t, tt.steps)
		})
	}
}

// Stats count slots: a window's InFlight is the sequences its requests hold.
func TestStatsCountSequences(t *testing.T) {
	t.Parallel()
	q, err := New(Settings{})
	if err != nil {
		t.Fatal(err)
	}
	q.SetWindow("a", 8)
	s := q.TryAcquire(Request{Seqs: 5})
	if s == nil {
		t.Fatal("TryAcquire(5 seqs) = nil, want a slot")
	}
	if w := q.Stats().Windows[0]; w.InFlight != 5 {
		t.Fatalf("InFlight %d, want 5", w.InFlight)
	}
	if q.TryAcquire(Request{Seqs: 4}) != nil {
		t.Fatal("TryAcquire(4 seqs) with 3 free = a slot, want nil")
	}
	s.Release()
	if w := q.Stats().Windows[0]; w.InFlight != 0 {
		t.Fatalf("InFlight %d after the release, want 0", w.InFlight)
	}
}

// InFlight counts the slots a window's grants hold, sequences and all, and
// nothing for a window that does not exist or a waiter not yet granted.
func TestCoreInFlight(t *testing.T) {
	t.Parallel()
	c, err := NewCore(Settings{})
	if err != nil {
		t.Fatal(err)
	}
	c.SetWindow("a", 4)
	check := func(step string, want int) {
		t.Helper()
		if got := c.InFlight("a"); got != want {
			t.Errorf("%s: InFlight(a) = %d, want %d", step, got, want)
		}
	}
	check("empty", 0)
	for id, seqs := range []int{3, 1, 2} { // the third waits: 4 of 4 held
		if _, _, err := c.Enqueue(t0, Request{ID: uint64(id + 1), Tokens: 1, Seqs: seqs}); err != nil {
			t.Fatal(err)
		}
	}
	check("3 + 1 granted, 2 waiting", 4)
	c.Release(t0, "a", Cost{Tokens: 1, Seqs: 3}) // the waiter's 2 start
	check("after releasing 3", 3)
	if got := c.InFlight("b"); got != 0 {
		t.Errorf("InFlight(b) of an unknown window = %d, want 0", got)
	}
}
