package quota

import (
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a fake clock that tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

// newClock starts on a day bucket's boundary (so on a second's too).
func newClock() *clock { return &clock{t: time.Unix(1_800_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newQuotas(t testing.TB, s Settings) (*Quotas, *clock) {
	t.Helper()
	c := newClock()
	s.Now = c.Now
	q, err := New(s)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return q, c
}

// step is one row of a step table: advance the clock, then reload the
// limits, settle an earlier row's charge and charge, each if set, then
// check what must hold.
type step struct {
	name    string
	advance time.Duration
	limits  *Limits
	settle  int // the row (1-based) whose charge to settle with actual
	actual  int64
	ask     *Ask
	want    *ExceededError // the ask's refusal; nil: admitted
	// used are counts after the step, from Snapshot: "kind/name/window"
	// with a raw client key as the name (absent: 0).
	used map[string]int64
	// clients, when set, are the client keys remembered (raw).
	clients []string
}

func runSteps(t *testing.T, q *Quotas, c *clock, steps []step) {
	t.Helper()
	settlers := make([]Settler, len(steps))
	for i, st := range steps {
		c.Advance(st.advance)
		if st.limits != nil {
			if err := q.SetLimits(*st.limits); err != nil {
				t.Fatalf("%d %s: SetLimits: %v", i+1, st.name, err)
			}
		}
		if st.settle > 0 {
			settlers[st.settle-1].Settle(st.actual)
		}
		if st.ask != nil {
			s, err := q.Charge(context.Background(), *st.ask)
			settlers[i] = s
			if s == nil {
				t.Fatalf("%d %s: Charge(%+v) returned a nil Settler", i+1, st.name, *st.ask)
			}
			checkRefusal(t, i+1, st.name, *st.ask, err, st.want)
		}
		snap := q.Snapshot()
		for key, want := range st.used {
			if got := usedIn(snap, key); got != want {
				t.Errorf("%d %s: used %s = %d, want %d", i+1, st.name, key, got, want)
			}
		}
		if st.clients != nil {
			checkClients(t, i+1, st.name, snap, st.clients)
		}
	}
}

func checkRefusal(t *testing.T, row int, name string, a Ask, err error, want *ExceededError) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Errorf("%d %s: Charge(%+v) = %v, want admitted", row, name, a, err)
		}
		return
	}
	var got *ExceededError
	if !errors.As(err, &got) || !errors.Is(err, ErrExceeded) {
		t.Errorf("%d %s: Charge(%+v) = %v, want %+v", row, name, a, err, *want)
		return
	}
	if *got != *want {
		t.Errorf("%d %s: Charge(%+v) = %+v, want %+v", row, name, a, *got, *want)
	}
	if got.RetryAfter() != got.Wait {
		t.Errorf("%d %s: RetryAfter() = %v, want Wait %v", row, name, got.RetryAfter(), got.Wait)
	}
}

// usedIn reads "kind/name/window" from a snapshot.
func usedIn(s Snapshot, key string) int64 {
	parts := strings.Split(key, "/")
	var u Usage
	switch parts[0] {
	case "class":
		u = s.Classes[parts[1]]
	case "model":
		u = s.Models[parts[1]]
	case "client":
		for _, c := range s.Clients.Heaviest {
			if c.Name == short(parts[1]) {
				u = c.Usage
			}
		}
	}
	if parts[2] == "day" {
		return u.Day.Used
	}
	return u.Minute.Used
}

func checkClients(t *testing.T, row int, name string, s Snapshot, want []string) {
	t.Helper()
	var got, names []string
	for _, c := range s.Clients.Heaviest {
		got = append(got, c.Name)
	}
	for _, k := range want {
		names = append(names, short(k))
	}
	slices.Sort(got)
	slices.Sort(names)
	if !slices.Equal(got, names) || s.Clients.Count != len(want) {
		t.Errorf("%d %s: clients remembered %v (count %d), want %v (%v)", row, name, got, s.Clients.Count, names, want)
	}
}

// short is a raw client key's name in errors and snapshots.
func short(key string) string { return shortName(sha256.Sum256([]byte(key))) }

func class(name string, est int64) *Ask { return &Ask{Class: name, Estimate: est} }

func classRefusal(limit, used, charge int64, wait time.Duration) *ExceededError {
	return &ExceededError{Kind: "class", Name: "batch", Window: Minute, Limit: limit, Used: used, Charge: charge, Wait: wait}
}

func minuteOf(n int64) *Limits { return &Limits{Classes: map[string]Limit{"batch": {PerMinute: n}}} }

// TestChargeSteps walks the quotas through step tables on a fake clock.
func TestChargeSteps(t *testing.T) {
	t.Parallel()
	const s = time.Second
	tests := []struct {
		name  string
		steps []step
	}{
		{"refusal and sliding expiry", []step{
			{name: "half a second in", advance: s / 2, limits: minuteOf(100), ask: class("batch", 60),
				used: map[string]int64{"class/batch/minute": 60}},
			{name: "at 10 s", advance: 9*s + s/2, ask: class("batch", 30), used: map[string]int64{"class/batch/minute": 90}},
			// The 60 of 0.5 s expire at 61 s: the end of their bucket, a minute on.
			{name: "no room: wait for the oldest bucket", ask: class("batch", 20), want: classRefusal(100, 90, 20, 51*s)},
			{name: "half a second before: at least 1 s", advance: 50*s + s/2, ask: class("batch", 20),
				want: classRefusal(100, 90, 20, s)},
			{name: "at 61 s the first charge expired", advance: s / 2, ask: class("batch", 20),
				used: map[string]int64{"class/batch/minute": 50}},
			{name: "at 71 s the second did", advance: 10 * s, ask: class("batch", 80),
				used: map[string]int64{"class/batch/minute": 100}},
			{name: "full: the bucket of 61 s frees enough at 122 s", ask: class("batch", 1), want: classRefusal(100, 100, 1, 51*s)},
		}},
		{"true-up both ways", []step{
			{name: "charge 80", limits: minuteOf(100), ask: class("batch", 80)},
			{name: "30 more do not fit", advance: s, ask: class("batch", 30), want: classRefusal(100, 80, 30, 60*s)},
			{name: "row 1 used 50: a refund makes room", settle: 1, actual: 50, used: map[string]int64{"class/batch/minute": 50}},
			{name: "now 30 fit", advance: 4 * s, ask: class("batch", 30), used: map[string]int64{"class/batch/minute": 80}},
			{name: "row 4 used 60: the excess counts", settle: 4, actual: 60, used: map[string]int64{"class/batch/minute": 110}},
			{name: "over: even 0 waits for row 1's bucket", advance: s, ask: class("batch", 0), want: classRefusal(100, 110, 0, 55*s)},
			{name: "a second settle is a no-op", settle: 1, actual: 0, used: map[string]int64{"class/batch/minute": 110}},
			{name: "both expired", advance: 60 * s, ask: class("batch", 40), used: map[string]int64{"class/batch/minute": 40}},
			{name: "row 8 settled after its bucket expired: the excess counts now", advance: 61 * s, settle: 8, actual: 90,
				used: map[string]int64{"class/batch/minute": 50}},
			{name: "charge 40", ask: class("batch", 40), used: map[string]int64{"class/batch/minute": 90}},
			{name: "later", advance: 61 * s, ask: class("batch", 30), used: map[string]int64{"class/batch/minute": 30}},
			{name: "row 10 settled after expiry: the refund is dropped", settle: 10, actual: 0,
				used: map[string]int64{"class/batch/minute": 30}},
		}},
		{"all or nothing over client, class and model", []step{
			{name: "alice in batch on m", limits: &Limits{PerClient: Limit{PerMinute: 100},
				Classes: map[string]Limit{"batch": {PerMinute: 50}}, Models: map[string]Limit{"m": {PerDay: 1000}}},
				ask:  &Ask{Client: "alice", Class: "batch", Model: "m", Estimate: 40},
				used: map[string]int64{"client/alice/minute": 40, "class/batch/minute": 40, "model/m/day": 40}},
			{name: "the class is short: nothing charged", advance: 10 * s, ask: &Ask{Client: "alice", Class: "batch", Model: "m", Estimate: 20},
				want:    classRefusal(50, 40, 20, 51*s),
				used:    map[string]int64{"client/alice/minute": 40, "class/batch/minute": 40, "model/m/day": 40, "model/m/minute": 40},
				clients: []string{"alice"}},
			{name: "without the class", ask: &Ask{Client: "alice", Model: "m", Estimate: 20},
				used: map[string]int64{"client/alice/minute": 60, "class/batch/minute": 40, "model/m/day": 60}},
			{name: "bob fills the class", ask: &Ask{Client: "bob", Class: "batch", Model: "m", Estimate: 10},
				used: map[string]int64{"client/bob/minute": 10, "class/batch/minute": 50, "model/m/day": 70}},
			// alice has room at 61 s, the class only at 71 s: the error names the class.
			{name: "two short: the later room is reported", ask: &Ask{Client: "alice", Class: "batch", Model: "m", Estimate: 45},
				want: classRefusal(50, 50, 45, 61*s)},
			// The day's first bucket (0–10 min) expires 24h10m after it began.
			{name: "the model's day", ask: &Ask{Client: "carol", Model: "m", Estimate: 940},
				want: &ExceededError{Kind: "model", Name: "m", Window: Day, Limit: 1000, Used: 70, Charge: 940,
					Wait: 24*time.Hour + 10*time.Minute - 10*s},
				clients: []string{"alice", "bob"}},
			{name: "what fits", ask: &Ask{Client: "carol", Model: "m", Estimate: 930},
				used: map[string]int64{"model/m/day": 1000}, clients: []string{"alice", "bob", "carol"}},
			{name: "the client's own", ask: &Ask{Client: "carol", Estimate: 71},
				want: &ExceededError{Kind: "client", Name: short("carol"), Window: Minute, Limit: 100, Used: 100 /* 930 clamped to 100 */, Charge: 71, Wait: 61 * s}},
		}},
		{"force", []step{
			{name: "charge 80", limits: minuteOf(100), ask: class("batch", 80)},
			{name: "forced over: charged and reported", ask: &Ask{Class: "batch", Estimate: 50, Force: true},
				want: classRefusal(100, 80, 50, 61*s), used: map[string]int64{"class/batch/minute": 130}},
			{name: "over", advance: s, ask: class("batch", 0), want: classRefusal(100, 130, 0, 60*s)},
			{name: "the forced one used 10", settle: 2, actual: 10, ask: class("batch", 10),
				used: map[string]int64{"class/batch/minute": 100}},
		}},
		{"clamp", []step{
			{name: "above the limit: charged as the limit (no day limit: all of it)", limits: minuteOf(100), ask: class("batch", 500),
				used: map[string]int64{"class/batch/minute": 100, "class/batch/day": 500}},
			{name: "full", advance: s, ask: class("batch", 1), want: classRefusal(100, 100, 1, 60*s)},
			{name: "runs again once the window is empty", advance: 60 * s, ask: class("batch", 500),
				used: map[string]int64{"class/batch/minute": 100, "class/batch/day": 1000}},
			{name: "row 1 used 300: minute expired (+200 now), day −200", settle: 1, actual: 300,
				used: map[string]int64{"class/batch/minute": 300, "class/batch/day": 800}},
		}},
		{"reload keeps charges", []step{
			{name: "charge 80", limits: minuteOf(100), ask: class("batch", 80)},
			{name: "lowered", limits: minuteOf(50), ask: class("batch", 10), want: classRefusal(50, 80, 10, 61*s)},
			{name: "raised", limits: minuteOf(200), ask: class("batch", 100), used: map[string]int64{"class/batch/minute": 180}},
			{name: "a day limit: the day counted already", limits: &Limits{Classes: map[string]Limit{"batch": {PerMinute: 200, PerDay: 190}}},
				ask:  class("batch", 20),
				want: &ExceededError{Kind: "class", Name: "batch", Window: Day, Limit: 190, Used: 180, Charge: 20, Wait: 24*time.Hour + 10*time.Minute}},
			{name: "removed: nothing applies", limits: &Limits{}, ask: class("batch", 1000), used: map[string]int64{"class/batch/minute": 0}},
			{name: "back: still counted", limits: minuteOf(200), ask: class("batch", 30), want: classRefusal(200, 180, 30, 61*s)},
		}},
		{"client overrides", []step{
			{name: "alice at PerClient", limits: &Limits{PerClient: Limit{PerMinute: 10},
				Clients: map[string]Limit{ClientName("vip"): {PerMinute: 1000}, "sha256:" + strings.ToUpper(ClientName("free")[7:]): {}}},
				ask: &Ask{Client: "alice", Estimate: 10}},
			{name: "alice full", ask: &Ask{Client: "alice", Estimate: 1},
				want: &ExceededError{Kind: "client", Name: short("alice"), Window: Minute, Limit: 10, Used: 10, Charge: 1, Wait: 61 * s}},
			{name: "vip", ask: &Ask{Client: "vip", Estimate: 500}, used: map[string]int64{"client/vip/minute": 500}},
			{name: "free: no limit, not remembered", ask: &Ask{Client: "free", Estimate: 1e6}, clients: []string{"alice", "vip"}},
			{name: "no client key", ask: &Ask{Estimate: 1e6}, clients: []string{"alice", "vip"}},
			{name: "a negative estimate counts as 0", ask: &Ask{Client: "bob", Estimate: -5},
				used: map[string]int64{"client/bob/minute": 0}, clients: []string{"alice", "vip", "bob"}},
		}},
		{"eviction: empty windows first, then the least recently charged", []step{
			{name: "a", limits: &Limits{PerClient: Limit{PerMinute: 100}}, ask: &Ask{Client: "a", Estimate: 10}},
			{name: "b", ask: &Ask{Client: "b", Estimate: 10}, clients: []string{"a", "b"}},
			{name: "a a day later", advance: 25 * time.Hour, ask: &Ask{Client: "a", Estimate: 10}},
			{name: "c forgets b, empty", ask: &Ask{Client: "c", Estimate: 10}, clients: []string{"a", "c"}},
			{name: "b's settle is dropped", settle: 2, actual: 100, clients: []string{"a", "c"}},
			{name: "d forgets a, the least recently charged", ask: &Ask{Client: "d", Estimate: 10}, clients: []string{"c", "d"}},
			{name: "a is new again (forgets c)", ask: &Ask{Client: "a", Estimate: 95}, clients: []string{"d", "a"}},
			{name: "e, settled to 0, is empty", ask: &Ask{Client: "e", Estimate: 10}, clients: []string{"a", "e"}},
			{name: "settle e", settle: 8, actual: 0},
			{name: "f forgets e, more recent than a but empty", ask: &Ask{Client: "f", Estimate: 10}, clients: []string{"a", "f"}},
			{name: "a still counts its 95", ask: &Ask{Client: "a", Estimate: 10},
				want: &ExceededError{Kind: "client", Name: short("a"), Window: Minute, Limit: 100, Used: 95, Charge: 10, Wait: 61 * s}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			max := 0
			if strings.HasPrefix(tt.name, "eviction") {
				max = 2
			}
			q, c := newQuotas(t, Settings{maxClients: max})
			runSteps(t, q, c, tt.steps)
		})
	}
}
