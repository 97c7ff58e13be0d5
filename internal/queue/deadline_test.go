package queue

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

func enqueueD(id uint64, tokens int64, deadline time.Duration) action {
	return action{fmt.Sprintf("Enqueue(%d, %d tokens, deadline t0+%v)", id, tokens, deadline),
		func(c *Core, now time.Time) ([]Grant, error) {
			g, ok, err := c.Enqueue(now, Request{ID: id, Tokens: tokens, Deadline: t0.Add(deadline)})
			if ok {
				return []Grant{g}, err
			}
			return nil, err
		}}
}

// wantWait checks a DeadlineError's predicted wait.
func wantWait(id uint64, tokens int64, deadline, wait time.Duration) action {
	return action{fmt.Sprintf("Enqueue(%d, %d tokens, deadline t0+%v) refused, wait %v", id, tokens, deadline, wait),
		func(c *Core, now time.Time) ([]Grant, error) {
			_, _, err := c.Enqueue(now, Request{ID: id, Tokens: tokens, Deadline: t0.Add(deadline)})
			var de *DeadlineError
			if !errors.As(err, &de) || !errors.Is(err, ErrDeadline) || de.Wait != wait || de.RetryAfter() != wait {
				return nil, fmt.Errorf("Enqueue = %v, want a DeadlineError with wait %v", err, wait)
			}
			return nil, nil
		}}
}

// enqueueQ enqueues r as it is (tenants, deadlines).
func enqueueQ(r Request) action {
	return action{fmt.Sprintf("Enqueue(%+v)", r), func(c *Core, now time.Time) ([]Grant, error) {
		g, ok, err := c.Enqueue(now, r)
		if ok {
			return []Grant{g}, err
		}
		return nil, err
	}}
}

// wantWaitQ checks that r is refused with a DeadlineError's predicted wait.
func wantWaitQ(r Request, wait time.Duration) action {
	return action{fmt.Sprintf("Enqueue(%+v) refused, wait %v", r, wait), func(c *Core, now time.Time) ([]Grant, error) {
		_, _, err := c.Enqueue(now, r)
		if de := (*DeadlineError)(nil); !errors.As(err, &de) || de.Wait != wait {
			return nil, fmt.Errorf("Enqueue = %v, want a DeadlineError with wait %v", err, wait)
		}
		return nil, nil
	}}
}

func gT(id uint64, up, tenant string, priority int) Grant {
	return Grant{ID: id, Upstream: up, Tenant: tenant, Priority: priority}
}

// warm measures window a's service rate at 10 slots a second: at a limit
// of 1, ten requests one after another from t0, each released 100 ms after
// it started, as the next arrives, so the window is full throughout (its
// rate counts only time it spent full). It ends at t0+1s with the window
// idle and its limit set to limit.
func warm(limit int) []step {
	out := []step{{act: setWindow("a", 1)}}
	for i := range 10 {
		at := time.Duration(i) * 100 * time.Millisecond
		out = append(out,
			step{at: at, act: enqueue(uint64(100+i), 1), want: []Grant{g(uint64(100+i), "a")}},
			step{at: at + 100*time.Millisecond, act: release("a")})
	}
	return append(out, step{at: time.Second, act: setWindow("a", limit)})
}

// quietThenBurst is sixteen requests of 50 ms one every 250 ms through a
// window of 8, which never fills, then 30 at once at t0+4s, each with 1.5 s
// to start. The window gave back 4 slots a second holding 0.2 on average;
// taken as it was measured, that rate predicted the 22 that wait to wait up
// to 5.4 s and refused all but 6, where a pod that serves 8 requests in 50 ms
// starts them all within 150 ms. Holding 8, it gives them back 40 times as
// fast (160 a second): the last waits 140 ms, and none is refused.
func quietThenBurst() []step {
	out := []step{{act: setWindow("a", 8)}}
	for i := range 16 {
		at := time.Duration(i) * 250 * time.Millisecond
		out = append(out,
			step{at: at, act: enqueue(uint64(100+i), 1), want: []Grant{g(uint64(100+i), "a")}},
			step{at: at + 50*time.Millisecond, act: release("a")})
	}
	burst := 4 * time.Second
	for i := range 30 {
		st := step{at: burst, act: enqueueD(uint64(i+1), 1, burst+1500*time.Millisecond)}
		if i < 8 {
			st.want = []Grant{g(uint64(i+1), "a")}
		}
		out = append(out, st)
	}
	return append(out, step{at: burst, act: stats(22, "a:8/8")})
}

func TestCoreDeadlines(t *testing.T) {
	t.Parallel()
	s := time.Second
	ms := time.Millisecond
	tests := []struct {
		name  string
		steps []step
	}{
		{"a deadline the queue cannot meet is refused at once", append(warm(1),
			step{at: s, act: enqueue(1, 1), want: []Grant{g(1, "a")}},
			step{at: s, act: enqueue(2, 1)},
			step{at: s, act: enqueue(3, 1)},
			// 2 ahead + itself = 3 slots at 10/s: 300 ms
			step{at: s, act: wantWait(4, 1, s+250*ms, 300*ms)},
			step{at: s, act: enqueueD(5, 1, s+300*ms)}, // exactly in time: waits
			step{at: s, act: stats(3, "a:1/1")},
			step{at: s + 100*ms, act: release("a"), want: []Grant{g(2, "a")}},
		)},
		{"no rate measured yet: nothing is predicted", []step{
			{act: setWindow("a", 1)},
			{act: enqueue(1, 1), want: []Grant{g(1, "a")}},
			{act: enqueue(2, 1)},
			{act: enqueueD(3, 1, 10*ms)},
			{act: stats(2, "a:1/1")},
		}},
		{"a deadline already past is refused", []step{
			{act: setWindow("a", 1)},
			{act: enqueue(1, 1), want: []Grant{g(1, "a")}},
			{at: s, act: wantWait(2, 1, s, 0)},
			{at: s, act: enqueueD(3, 1, 0), err: ErrDeadline},
		}},
		{"a deadline that can start now is granted", []step{
			{act: setWindow("a", 1)},
			{act: enqueueD(1, 1, 0), want: []Grant{g(1, "a")}},
		}},
		{"shortest first: only shorter or aged waiters are ahead", append(append(warm(1), step{at: time.Second, act: setOrder(ShortestFirst)}),
			step{at: s, act: enqueue(1, 1), want: []Grant{g(1, "a")}},
			step{at: s, act: enqueue(2, 900)},
			step{at: s, act: enqueue(3, 900)},
			step{at: s, act: enqueueD(4, 10, s+150*ms)},          // shorter than both: nobody ahead, 100 ms
			step{at: s, act: wantWait(5, 900, s+350*ms, 400*ms)}, // 2, 3 (as long: earlier) and 4 ahead
			step{at: s, act: enqueueD(6, 5, s+200*ms)},           // only 4 is shorter: 200 ms
			step{at: s + 100*ms, act: release("a"), want: []Grant{g(6, "a")}},
		)},
		{"earliest deadline: later deadlines and none are behind", append(append(warm(1), step{at: time.Second, act: setOrder(EarliestDeadline)}),
			step{at: s, act: enqueue(1, 1), want: []Grant{g(1, "a")}},
			step{at: s, act: enqueue(2, 1)},                    // no deadline: after every deadline
			step{at: s, act: enqueueD(3, 1, s+900*ms)},         // ahead: none; 100 ms
			step{at: s, act: enqueueD(4, 1, s+150*ms)},         // goes before 3
			step{at: s, act: wantWait(5, 1, s+190*ms, 200*ms)}, // 4 ahead (earlier), 3 behind
			step{at: s, act: enqueueD(6, 1, s+900*ms)},         // ties 3: after it
			step{at: s + 100*ms, act: release("a"), want: []Grant{g(4, "a")}},
			step{at: s + 200*ms, act: release("a"), want: []Grant{g(3, "a")}},
			step{at: s + 300*ms, act: release("a"), want: []Grant{g(6, "a")}},
			step{at: s + 400*ms, act: release("a"), want: []Grant{g(2, "a")}},
		)},
		{"tenants: of another tenant's backlog, only its share is ahead", append(warm(1),
			step{at: s, act: enqueueQ(Request{ID: 1, Tenant: "h"}), want: []Grant{gT(1, "a", "h", 0)}},
			step{at: s, act: enqueueQ(Request{ID: 2, Tenant: "h"})},
			step{at: s, act: enqueueQ(Request{ID: 3, Tenant: "h"})},
			step{at: s, act: enqueueQ(Request{ID: 4, Tenant: "h"})},
			step{at: s, act: enqueueQ(Request{ID: 5, Tenant: "h"})},
			step{at: s, act: enqueueQ(Request{ID: 6, Tenant: "h"})},
			// l: none of its own ahead, one of h's (1 × 1/1 of 5), itself: 200 ms, not 600
			step{at: s, act: wantWaitQ(Request{ID: 7, Tenant: "l", Deadline: t0.Add(s + 150*ms)}, 200*ms)},
			step{at: s, act: enqueueQ(Request{ID: 8, Tenant: "l", Deadline: t0.Add(s + 200*ms)})},
			// h: its 5, then l's 1 (min(1 waiting, 6 × 1/1)), itself: 700 ms
			step{at: s, act: wantWaitQ(Request{ID: 9, Tenant: "h", Deadline: t0.Add(s + 600*ms)}, 700*ms)},
			// weight 1/2: 2 of h's, l's 1, itself; weight 4: 1 each
			step{at: s, act: wantWaitQ(Request{ID: 10, Tenant: "w", Weight: 0.5, Deadline: t0.Add(s + 300*ms)}, 400*ms)},
			step{at: s, act: wantWaitQ(Request{ID: 11, Tenant: "w", Weight: 4, Deadline: t0.Add(s + 200*ms)}, 300*ms)},
			// a higher priority counts whole, of any tenant; y at priority 1 has h's and l's behind it
			step{at: s, act: enqueueQ(Request{ID: 12, Tenant: "x", Priority: 1})},
			step{at: s, act: wantWaitQ(Request{ID: 13, Tenant: "y", Priority: 1, Deadline: t0.Add(s + 100*ms)}, 200*ms)},
			// l: x's 1 above, its own 8, h's 2 (2 × 1/1), itself: 500 ms
			step{at: s, act: wantWaitQ(Request{ID: 14, Tenant: "l", Deadline: t0.Add(s + 100*ms)}, 500*ms)},
			step{at: s + 100*ms, act: release("a"), want: []Grant{gT(12, "a", "x", 1)}},
		)},
		{"a burst after a quiet spell: the rate follows what the window holds", quietThenBurst()},
		{"a cut window's excess is ahead too", append(warm(3),
			step{at: s, act: enqueue(1, 1), want: []Grant{g(1, "a")}},
			step{at: s, act: enqueue(2, 1), want: []Grant{g(2, "a")}},
			step{at: s, act: enqueue(3, 1), want: []Grant{g(3, "a")}},
			step{at: s, act: setWindow("a", 1)},
			step{at: s, act: wantWait(4, 1, s+200*ms, 300*ms)}, // 2 above the limit + itself
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := NewCore(Settings{})
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range tt.steps {
				got, err := st.act.run(c, t0.Add(st.at))
				if !errors.Is(err, st.err) || (st.err == nil && err != nil) {
					t.Fatalf("step %d: %s error = %v, want %v", i, st.act.desc, err, st.err)
				}
				for i := range got {
					got[i].Cost = Cost{}
				}
				if !slices.Equal(got, st.want) {
					t.Fatalf("step %d: %s = %v, want %v", i, st.act.desc, got, st.want)
				}
				checkHeaps(t, c)
			}
		})
	}
}

// A waiter aged past StarvationAfter goes before any newcomer under
// ShortestFirst, whatever its size; priority ranks before every order.
func TestGoesBefore(t *testing.T) {
	t.Parallel()
	c, err := NewCore(Settings{StarvationAfter: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Minute)
	newcomer := &item{tokens: 10, arrival: now, deadline: now.Add(time.Second)}
	for _, tc := range []struct {
		name  string
		o     item
		order Order
		want  bool
	}{
		{"fifo: every waiter", item{tokens: 900, arrival: now}, FIFO, true},
		{"shortest first: a longer young one is behind", item{tokens: 900, arrival: now.Add(-time.Second)}, ShortestFirst, false},
		{"shortest first: an aged one is ahead", item{tokens: 900, arrival: now.Add(-10 * time.Second)}, ShortestFirst, true},
		{"earliest deadline: none is behind", item{arrival: now}, EarliestDeadline, false},
		{"earliest deadline: the same is ahead", item{deadline: now.Add(time.Second)}, EarliestDeadline, true},
		{"a higher priority is ahead of any order", item{priority: 1, tokens: 900, arrival: now}, ShortestFirst, true},
		{"a lower priority is behind", item{priority: -1, deadline: now}, EarliestDeadline, false},
	} {
		if got := c.goesBefore(now, &tc.o, newcomer, tc.order); got != tc.want {
			t.Errorf("%s: goesBefore = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestServiceRate(t *testing.T) {
	t.Parallel()
	s := time.Second
	var r serviceRate
	for i := range minRateEvents - 1 { // one slot held throughout: 1 slot-second a second
		r.add(t0.Add(time.Duration(i)*s), float64(i), 2)
	}
	if got := r.perSecond(t0.Add(10*s), 10, 1); got != 0 {
		t.Errorf("perSecond after %d releases = %v, want 0 (not measured)", minRateEvents-1, got)
	}
	r.add(t0.Add(7*s), 7, 2) // 8 releases of 2 slots over t0 … t0+7s
	if got := r.perSecond(t0.Add(8*s), 8, 1); got != 2 {
		t.Errorf("perSecond = %v, want 16 slots / 8 s = 2", got)
	}
	if got := r.perSecond(t0.Add(8*s), 8, 3); got != 6 {
		t.Errorf("perSecond holding 3 = %v, want 3 × 2 (Little: the same requests, three at a time)", got)
	}
	if got := r.perSecond(t0.Add(8*s), 16, 1); got != 2 {
		t.Errorf("perSecond holding less than the mean (2) = %v, want 2: never scaled down", got)
	}
	if got := r.perSecond(t0.Add(8*s), 4.8, 1); got != 2 {
		t.Errorf("perSecond holding 1 against a mean of 0.6 = %v, want 2: below scaleFrom, as measured", got)
	}
	if got := r.perSecond(t0.Add(8*s), 4, 1); got != 4 {
		t.Errorf("perSecond holding 1 against a mean of 0.5 = %v, want 2 × 2", got)
	}
	for i := range 2 * rateEvents { // the ring forgets the old ones
		at := 100*s + time.Duration(i)*10*time.Millisecond
		r.add(t0.Add(at), at.Seconds(), 1)
	}
	end := 100*s + 2*rateEvents*10*time.Millisecond
	if got := r.perSecond(t0.Add(end), end.Seconds(), 1); got != float64(rateEvents) {
		t.Errorf("perSecond over the last %d releases in 0.64 s = %v, want %d (a span of at least 1 s)", rateEvents, got, rateEvents)
	}
}
