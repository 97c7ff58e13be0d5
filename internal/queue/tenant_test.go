package queue

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCoreTenantSteps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		s     Settings
		steps []tstep
	}{
		{name: "10:1: the light tenant is served every other grant", steps: steps(
			[]tstep{{act: win("a", 1)}, {act: enqT(1, "heavy", 100), want: []string{"1a"}}},
			enqMany("heavy", 100, seqIDs(2, 10)...),
			enqMany("light", 100, 101, 102, 103),
			[]tstep{{act: tenants(2, "heavy:100/9/1", "light:100/3/0")}}, // light lifted to heavy's counter
			releases([]uint64{1, 2, 101, 3, 102, 4, 103, 5}, "2a", "101a", "3a", "102a", "4a", "103a", "5a", "6a"),
		)},
		{name: "a newly backlogged tenant is lifted to the least backlogged counter", steps: steps(
			[]tstep{{act: win("a", 1)}, {act: enqT(1, "h", 100), want: []string{"1a"}}},
			enqMany("h", 100, 2, 3, 4, 5),
			[]tstep{{act: enqT(6, "m", 50)}},
			releases([]uint64{1, 2}, "2a", "6a"), // m lifted to h's 100: the tie goes to h, then m has the least
			[]tstep{
				{act: tenants(2, "h:200/3/0", "m:150/0/1")},
				{act: enqT(7, "l", 10)}, // lifted to h's 200, the least backlogged: not to m's 150 (not backlogged)
				{act: tenants(3, "h:200/3/0", "l:200/1/0", "m:150/0/1")},
			},
			releases([]uint64{6, 3, 7}, "3a", "7a", "4a"), // tie: h's head arrived first
		)},
		{name: "an idle tenant cannot bank credit", steps: steps(
			[]tstep{{act: win("a", 1)}, {act: enqT(1, "l", 100), want: []string{"1a"}}, {act: rel(1)}},
			[]tstep{{act: enqT(2, "h", 100), want: []string{"2a"}}}, // none backlogged: lifted to l's 100 (granted last), then 200
			enqMany("h", 100, 3, 4, 5, 6, 7, 8),
			releases([]uint64{2, 3, 4}, "3a", "4a", "5a"),
			[]tstep{
				{act: enqT(9, "l", 100)}, // l, idle since 100, is lifted to 500: one turn, not four in a row
				{act: tenants(2, "h:500/3/1", "l:500/1/0")},
			},
			releases([]uint64{5, 6, 9, 7}, "6a", "9a", "7a", "8a"),
		)},
		{name: "weights 2:1 give 2:1 service", steps: steps(
			[]tstep{{act: win("a", 0)}},
			[]tstep{
				{act: enqR(Request{ID: 1, Tenant: "two", Weight: 2, Service: 100})},
				{act: enqR(Request{ID: 2, Tenant: "two", Weight: 2, Service: 100})},
				{act: enqR(Request{ID: 3, Tenant: "two", Weight: 2, Service: 100})},
				{act: enqR(Request{ID: 4, Tenant: "two", Weight: 2, Service: 100})},
				{act: enqR(Request{ID: 5, Tenant: "two", Weight: 2, Service: 100})},
				{act: enqR(Request{ID: 6, Tenant: "two", Weight: 2, Service: 100})},
			},
			enqMany("one", 100, 11, 12, 13, 14),
			[]tstep{{act: win("a", 1), want: []string{"1a"}}},
			releases([]uint64{1, 11, 2, 3, 12, 4, 5, 13}, "11a", "2a", "3a", "12a", "4a", "5a", "13a", "6a"),
			[]tstep{{act: tenants(2, "one:300/1/0", "two:300/0/1")}},
		)},
		{name: "a higher priority goes first whatever the counters", steps: steps(
			[]tstep{{act: win("a", 1)}},
			[]tstep{
				{act: enqR(Request{ID: 1, Tenant: "big", Priority: 1, Service: 1000}), want: []string{"1a"}},
				{act: enqR(Request{ID: 2, Tenant: "big", Priority: 1, Service: 1000})},
				{act: enqR(Request{ID: 3, Tenant: "big", Priority: 1, Service: 1000})},
				{act: enqR(Request{ID: 4, Tenant: "small", Service: 1})},
				{act: enqR(Request{ID: 5, Tenant: "big", Service: 1})}, // the same tenant has a counter per priority
				{act: tenants(3, "big@1:1000/2/1", "big:0/1/0", "small:0/1/0")},
			},
			releases([]uint64{1, 2, 3, 4}, "2a", "3a", "4a", "5a"),
		)},
		{name: "settle corrects the counter by the real service", steps: steps(
			[]tstep{{act: win("a", 2)}},
			[]tstep{
				{act: enqT(1, "h", 1000), want: []string{"1a"}},
				{act: enqT(2, "l", 300), want: []string{"2a"}}, // none backlogged: lifted to h's 1000 (granted last), then 1300
				{act: enqT(3, "h", 1000)},                      // none backlogged: lifted to l's 1300
				{act: enqT(4, "l", 300)},
				{act: settleT(1, 100)}, // h's first cost 100, not 1000: 1300 - 900
				{act: tenants(2, "l:1300/1/1", "h:400/1/1")},
				{act: settleT(99, 5)}, // unknown: nothing
			},
			releases([]uint64{2, 3}, "3a", "4a"), // h has the least now
			[]tstep{
				{act: settleT(3, -5)}, // after its Release; negative counts as 0: 1400 - 1000
				{act: tenants(2, "l:1600/0/1", "h:400/0/1")},
				{act: rel(1)},
				{act: tenants(2, "l:1600/0/1", "h:400/0/0")},
			},
		)},
		{name: "a passed-over waiter of one tenant does not block another's", steps: steps(
			[]tstep{{act: win("a", 1)}, {act: win("b", 1)}},
			[]tstep{
				{act: enqT(1, "x", 10), want: []string{"1a"}},
				{act: enqT(2, "x", 10), want: []string{"2b"}},
				{act: enqR(Request{ID: 3, Tenant: "a-only", Service: 1, Exclude: []string{"b"}})}, // first: ties x, older
				{act: enqT(4, "x", 10)},
				{act: rel(2), want: []string{"4b"}}, // a-only cannot use b: x takes it
				{act: rel(1), want: []string{"3a"}},
			},
		)},
		{name: "idle tenants are forgotten beyond MaxTenants, least counter first", s: Settings{MaxTenants: 2}, steps: steps(
			[]tstep{{act: win("a", 1)}},
			[]tstep{
				{act: enqT(1, "t1", 10), want: []string{"1a"}},
				{act: enqT(2, "t2", 20)}, // lifted to t1's 10 (granted last)
				{act: enqT(3, "t3", 30)}, // lifted to t2's 10
				{act: enqT(4, "t4", 40)},
				{act: rel(1), want: []string{"2a"}},
				{act: rel(2), want: []string{"3a"}},
				{act: tenants(4, "t4:10/1/0", "t3:40/0/1", "t2:30/0/0", "t1:10/0/0")}, // two idle; t4 waits with the least
				{act: rel(3), want: []string{"4a"}},                                   // three idle: t1, the least, forgotten
				{act: tenants(3, "t4:50/0/1", "t3:40/0/0", "t2:30/0/0")},
				{act: enqT(5, "t1", 1)}, // back from 0, lifted to t4's 50 (granted last)
				{act: tenants(4, "t1:50/1/0", "t4:50/0/1", "t3:40/0/0", "t2:30/0/0")},
				{act: rel(4), want: []string{"5a"}}, // t2 forgotten; t4, waiting or in flight till now, never was
				{act: tenants(3, "t1:51/0/1", "t4:50/0/0", "t3:40/0/0")},
				{act: settleT(2, 0)}, // t2 is forgotten: a no-op
				{act: tenants(3, "t1:51/0/1", "t4:50/0/0", "t3:40/0/0")},
			},
		)},
		{name: "cancel and drain leave tenants consistent", steps: steps(
			[]tstep{{act: win("a", 1)}, {act: enqT(1, "h", 10), want: []string{"1a"}}},
			enqMany("h", 10, 2, 3),
			enqMany("l", 10, 4, 5),
			[]tstep{
				{act: cancelT(2)},
				{act: cancelT(4)},
				{act: tenants(2, "h:10/1/1", "l:10/1/0")},
				{act: tact{"Drain", func(r *rig, now time.Time) ([]Grant, error) {
					if got := r.c.Drain(now); !slices.Equal(got, []uint64{3, 5}) {
						return nil, fmt.Errorf("Drain() = %v, want [3 5]", got)
					}
					return nil, nil
				}}},
				{act: tenants(2, "h:10/0/1", "l:10/0/0")},
				{act: rel(1)},
				{act: enqT(6, "l", 10), want: []string{"6a"}},
			},
		)},
		{name: "take charges as a grant does", steps: steps(
			[]tstep{{act: win("a", 1)}},
			[]tstep{
				{act: tact{"Take(1)", func(r *rig, _ time.Time) ([]Grant, error) {
					q := Request{ID: 1, Tenant: "retry", Service: 70}
					r.reqs[1] = q
					if g, ok := r.c.take(t0, q); ok {
						return []Grant{g}, nil
					}
					return nil, nil
				}}, want: []string{"1a"}},
				{act: tenants(1, "retry:70/0/1")},
			},
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runTenantSteps(t, tt.s, tt.steps)
		})
	}
}

func TestMaxTenantsSetting(t *testing.T) {
	t.Parallel()
	if _, err := NewCore(Settings{MaxTenants: -1}); err == nil || !strings.Contains(err.Error(), "queue: MaxTenants") {
		t.Fatalf("NewCore(MaxTenants -1) = %v, want an error naming MaxTenants", err)
	}
	s, err := Settings{}.withDefaults()
	if err != nil || s.MaxTenants != defaultMaxTenants {
		t.Fatalf("withDefaults().MaxTenants = %d, %v; want %d", s.MaxTenants, err, defaultMaxTenants)
	}
	// Lowering it forgets idle tenants at once, least counter first.
	c, _ := NewCore(Settings{})
	c.SetWindow("a", 10)
	for i := range 5 {
		g, _, _ := c.Enqueue(t0, Request{ID: uint64(i), Tenant: fmt.Sprint("t", i), Service: int64(10 * (5 - i))})
		c.Release(t0, g.Upstream, g.Cost)
	}
	if err := c.updateSettings(Settings{MaxTenants: 2}); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.TenantCount != 2 {
		t.Fatalf("TenantCount = %d after lowering MaxTenants to 2, want 2", s.TenantCount)
	}
}

// Stats lists at most MaxTenantStats tenants, the backlogged first.
func TestTenantStatsBounded(t *testing.T) {
	t.Parallel()
	c, _ := NewCore(Settings{MaxLength: 1000})
	c.SetWindow("a", 1)
	c.Enqueue(t0, Request{ID: 1000, Tenant: "first"})
	for i := range 100 {
		c.Enqueue(t0, Request{ID: uint64(i), Tenant: fmt.Sprintf("t%03d", i%70)})
	}
	s := c.Stats()
	if len(s.Tenants) != maxTenantStats || s.TenantCount != 71 {
		t.Fatalf("Stats() lists %d of %d tenants, want %d of 71", len(s.Tenants), s.TenantCount, maxTenantStats)
	}
	if s.Tenants[0].Waiting != 2 || s.Tenants[0].Tenant != "t000" || s.Tenants[29].Tenant != "t029" || s.Tenants[30].Waiting != 1 {
		t.Fatalf("Stats().Tenants = %+v…, want the 30 with 2 waiters first, by name", s.Tenants[:31])
	}
}
