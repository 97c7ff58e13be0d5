package queue

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// usedT wants the slots each tenant holds on window name, as
// "tenant:slots" sorted, and checks them against the grants the rig holds.
func usedT(name string, want ...string) tact {
	return tact{fmt.Sprintf("used(%s)", name), func(r *rig, _ time.Time) ([]Grant, error) {
		w, _ := r.c.find(name)
		var got []string
		for a, n := range w.used {
			got = append(got, fmt.Sprintf("%s:%d", a.name, n))
		}
		slices.Sort(got)
		held := map[string]int{}
		for _, g := range r.held {
			if g.Upstream == name {
				held[g.Tenant] += g.Cost.slots()
			}
		}
		var fromHeld []string
		for tn, n := range held {
			fromHeld = append(fromHeld, fmt.Sprintf("%s:%d", tn, n))
		}
		slices.Sort(fromHeld)
		if !slices.Equal(got, want) || !slices.Equal(fromHeld, want) {
			return nil, fmt.Errorf("used = %v, held %v, want %v", got, fromHeld, want)
		}
		return nil, nil
	}}
}

// updateS applies new settings, then dispatches.
func updateS(s Settings) tact {
	return tact{fmt.Sprintf("updateSettings(%+v)", s), func(r *rig, now time.Time) ([]Grant, error) {
		if err := r.c.updateSettings(s); err != nil {
			return nil, err
		}
		return r.c.Dispatch(now), nil
	}}
}

func TestCoreShareSteps(t *testing.T) {
	t.Parallel()
	heavyCap := Settings{Shares: map[string]Share{"heavy": {Max: 0.8}}}
	lightMin := Settings{Shares: map[string]Share{"light": {Min: 0.2}}}
	tests := []struct {
		name  string
		s     Settings
		steps []tstep
	}{
		{name: "a light tenant is granted at once while a capped heavy one fills the rest", s: heavyCap, steps: steps(
			[]tstep{{act: win("a", 10)}},
			[]tstep{
				{act: enqT(1, "heavy", 100), want: []string{"1a"}}, {act: enqT(2, "heavy", 100), want: []string{"2a"}},
				{act: enqT(3, "heavy", 100), want: []string{"3a"}}, {act: enqT(4, "heavy", 100), want: []string{"4a"}},
				{act: enqT(5, "heavy", 100), want: []string{"5a"}}, {act: enqT(6, "heavy", 100), want: []string{"6a"}},
				{act: enqT(7, "heavy", 100), want: []string{"7a"}}, {act: enqT(8, "heavy", 100), want: []string{"8a"}},
			},
			enqMany("heavy", 100, 9, 10, 11), // at its cap of 8 with 2 slots free: they wait
			[]tstep{
				{act: usedT("a", "heavy:8")},
				{act: enqT(101, "light", 100), want: []string{"101a"}}, // no wait behind heavy's slots
				{act: enqT(102, "light", 100), want: []string{"102a"}},
				{act: enqT(103, "light", 100)}, // the window is full
				{act: usedT("a", "heavy:8", "light:2")},
			},
			// light lifted to heavy's 900 on arrival: 103 (1100) after 9 (900)? heavy is at its cap
			// while it holds 8, so a heavy release frees a heavy slot and a light one a slot light may use.
			releases([]uint64{1, 101, 9}, "9a", "103a", "10a"),
			[]tstep{{act: usedT("a", "heavy:8", "light:2")}},
		)},
		{name: "a capped tenant waits at its cap with room left, and nobody else waits", s: heavyCap, steps: steps(
			[]tstep{{act: win("a", 5)}}, // cap ceil(0.8 × 5) = 4
			[]tstep{
				{act: enqT(1, "heavy", 1), want: []string{"1a"}}, {act: enqT(2, "heavy", 1), want: []string{"2a"}},
				{act: enqT(3, "heavy", 1), want: []string{"3a"}}, {act: enqT(4, "heavy", 1), want: []string{"4a"}},
				{act: enqT(5, "heavy", 1)},
				{act: win("a", 5)}, // a dispatch with room: heavy is set aside, nothing granted
				{act: usedT("a", "heavy:4")},
				{act: cancelT(5)},
				{act: rel(1)},
				{act: usedT("a", "heavy:3")},
			},
		)},
		{name: "slots kept for a min share go to no other tenant, whatever the counters", s: lightMin, steps: steps(
			[]tstep{{act: win("a", 10)}}, // floor(0.2 × 10) = 2 kept for light
			[]tstep{
				{act: enqT(1, "heavy", 1), want: []string{"1a"}}, {act: enqT(2, "heavy", 1), want: []string{"2a"}},
				{act: enqT(3, "heavy", 1), want: []string{"3a"}}, {act: enqT(4, "heavy", 1), want: []string{"4a"}},
				{act: enqT(5, "heavy", 1), want: []string{"5a"}}, {act: enqT(6, "heavy", 1), want: []string{"6a"}},
				{act: enqT(7, "heavy", 1), want: []string{"7a"}}, {act: enqT(8, "heavy", 1), want: []string{"8a"}},
				{act: enqT(9, "heavy", 1)}, // 2 slots free, both light's
				{act: enqT(101, "light", 1000), want: []string{"101a"}},
				{act: enqT(102, "light", 1000), want: []string{"102a"}},
				{act: enqT(103, "light", 1000)},
				{act: usedT("a", "heavy:8", "light:2")},
				// heavy's counter (8) is below light's (2008), but the slot light
				// frees is still kept for it: light is below its min again.
				{act: rel(101), want: []string{"103a"}},
				{act: rel(1), want: []string{"9a"}},
				{act: usedT("a", "heavy:8", "light:2")},
			},
		)},
		{name: "a min share is kept while its tenant is idle, and given up above it", s: lightMin, steps: steps(
			[]tstep{{act: win("a", 5)}}, // floor(0.2 × 5) = 1
			[]tstep{
				{act: enqT(1, "heavy", 1), want: []string{"1a"}}, {act: enqT(2, "heavy", 1), want: []string{"2a"}},
				{act: enqT(3, "heavy", 1), want: []string{"3a"}}, {act: enqT(4, "heavy", 1), want: []string{"4a"}},
				{act: enqT(5, "heavy", 1)},
				{act: enqT(101, "light", 1), want: []string{"101a"}},
				{act: rel(1), want: []string{"5a"}}, // light holds its min: nothing is kept
				{act: rel(101)},                     // kept again
				{act: enqT(102, "light", 1), want: []string{"102a"}},
			},
		)},
		{name: "priorities: a capped higher class is set aside and a lower one takes the room", s: Settings{Shares: map[string]Share{"hi": {Max: 0.5}}}, steps: steps(
			[]tstep{{act: win("a", 4)}},
			[]tstep{
				{act: enqR(Request{ID: 1, Tenant: "hi", Priority: 1, Service: 1}), want: []string{"1a"}},
				{act: enqR(Request{ID: 2, Tenant: "hi", Priority: 1, Service: 1}), want: []string{"2a"}},
				{act: enqR(Request{ID: 3, Tenant: "hi", Priority: 1, Service: 1})},
				{act: enqR(Request{ID: 4, Tenant: "lo", Service: 1}), want: []string{"4a"}},
				{act: enqR(Request{ID: 5, Tenant: "lo", Service: 1}), want: []string{"5a"}},
				{act: enqR(Request{ID: 6, Tenant: "lo", Service: 1})}, // full
				{act: enqR(Request{ID: 7, Tenant: "hi", Service: 1})}, // hi's share counts every priority
				{act: rel(4), want: []string{"6a"}},                   // hi at its cap: lo's goes
				{act: rel(1), want: []string{"3a"}},                   // the higher priority first
				{act: usedT("a", "hi:2", "lo:2")},
			},
		)},
		{name: "a window cut by pressure cuts the shares with it", s: Settings{Shares: map[string]Share{"heavy": {Max: 0.5}}}, steps: steps(
			[]tstep{{act: win("a", 10)}},
			[]tstep{
				{act: enqT(1, "heavy", 1), want: []string{"1a"}}, {act: enqT(2, "heavy", 1), want: []string{"2a"}},
				{act: enqT(3, "heavy", 1), want: []string{"3a"}}, {act: enqT(4, "heavy", 1), want: []string{"4a"}},
				{act: enqT(5, "heavy", 1), want: []string{"5a"}},
				{act: enqT(6, "heavy", 1)},
				{act: win("a", 4)}, // cap ceil(0.5 × 4) = 2
				{act: rel(1)}, {act: rel(2)}, {act: rel(3)},
				{act: rel(4), want: []string{"6a"}},
				{act: usedT("a", "heavy:2")},
			},
		)},
		{name: "a request larger than its cap runs alone", s: Settings{Shares: map[string]Share{"h": {Max: 0.5}}}, steps: steps(
			[]tstep{{act: win("a", 4)}},
			[]tstep{
				{act: enqR(Request{ID: 1, Tenant: "h", Seqs: 3, Service: 1}), want: []string{"1a"}},
				{act: enqR(Request{ID: 2, Tenant: "h", Service: 1})},
				{act: enqR(Request{ID: 3, Tenant: "x", Service: 1}), want: []string{"3a"}},
				{act: usedT("a", "h:3", "x:1")},
				{act: rel(1), want: []string{"2a"}},
			},
		)},
		{name: "the default cap binds each unlisted tenant on its own", s: Settings{DefaultMaxShare: 0.5, Shares: map[string]Share{"vip": {}}}, steps: steps(
			[]tstep{{act: win("a", 6)}},
			[]tstep{
				{act: enqT(1, "x", 1), want: []string{"1a"}}, {act: enqT(2, "x", 1), want: []string{"2a"}},
				{act: enqT(3, "x", 1), want: []string{"3a"}}, {act: enqT(4, "x", 1)},
				{act: enqT(5, "y", 1), want: []string{"5a"}},
				{act: enqT(6, "vip", 1), want: []string{"6a"}}, {act: enqT(7, "vip", 1), want: []string{"7a"}},
				{act: usedT("a", "vip:2", "x:3", "y:1")},
			},
		)},
		{name: "zero shares: Max 0 is no cap, Min 0 keeps nothing", s: Settings{Shares: map[string]Share{"z": {}}}, steps: steps(
			[]tstep{{act: win("a", 2)}},
			[]tstep{
				{act: enqT(1, "z", 1), want: []string{"1a"}}, {act: enqT(2, "z", 1), want: []string{"2a"}},
				{act: usedT("a", "z:2")},
			},
		)},
		{name: "a min share of 1 keeps the whole window", s: Settings{Shares: map[string]Share{"solo": {Min: 1}}}, steps: steps(
			[]tstep{{act: win("a", 2)}},
			[]tstep{
				{act: enqT(1, "other", 1)},
				{act: enqT(11, "solo", 1), want: []string{"11a"}}, {act: enqT(12, "solo", 1), want: []string{"12a"}},
				{act: rel(11)},
				{act: updateS(Settings{}), want: []string{"1a"}}, // shares off: the kept slot is free
				{act: rel(12)}, {act: rel(1)},
			},
		)},
		{name: "turning shares on counts the grants from then on", steps: steps(
			[]tstep{{act: win("a", 4)}},
			[]tstep{
				{act: enqT(1, "h", 1), want: []string{"1a"}},
				{act: updateS(Settings{Shares: map[string]Share{"h": {Max: 0.5}}})},
				{act: enqT(2, "h", 1), want: []string{"2a"}},
				{act: enqT(3, "h", 1), want: []string{"3a"}}, // 1 is not counted
				{act: enqT(4, "h", 1)},
				{act: rel(1)}, {act: rel(2), want: []string{"4a"}},
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

func TestShareSettingsErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		s    Settings
		want string
	}{
		{Settings{DefaultMaxShare: 1.5}, "DefaultMaxShare must be in [0, 1]"},
		{Settings{Shares: map[string]Share{"a": {Min: -0.1}}}, `Shares["a"].Min must be in [0, 1]`},
		{Settings{Shares: map[string]Share{"a": {Max: 2}}}, `Shares["a"].Max must be in [0, 1]`},
		{Settings{Shares: map[string]Share{"a": {Min: 0.5, Max: 0.4}}}, `Shares["a"].Min (0.5) must not exceed its Max (0.4)`},
		{Settings{Shares: map[string]Share{"a": {Min: 0.6}, "b": {Min: 0.5}}}, "Mins must sum to at most 1, got 1.1"},
	} {
		if _, err := NewCore(tt.s); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewCore(%+v) = %v, want %q", tt.s, err, tt.want)
		}
	}
}
