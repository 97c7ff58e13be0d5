package queue

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// warmT runs ten requests of tenant "w" through window a, one after another
// from t0, each released 100 ms after it started, as the next arrives, at a
// limit of 1: the window has given back 10 slots a second holding 1, so
// each request holds its slot 100 ms, and n running give slots back at
// 10n a second. It ends at t0+1s with the window idle and its limit set to
// limit.
func warmT(limit int) []tstep {
	out := []tstep{{act: win("a", 1)}}
	for i := range 10 {
		id, at := uint64(900+i), time.Duration(i)*100*time.Millisecond
		out = append(out,
			tstep{at: at, act: enqT(id, "w", 1), want: []string{fmt.Sprintf("%da", id)}},
			tstep{at: at + 100*time.Millisecond, act: rel(id)})
	}
	return append(out, tstep{at: time.Second, act: win("a", limit)})
}

// waitT wants q refused with a DeadlineError predicting wait.
func waitT(q Request, wait time.Duration) tact {
	return tact{fmt.Sprintf("Enqueue(%+v) refused, wait %v", q, wait), func(r *rig, now time.Time) ([]Grant, error) {
		_, _, err := r.c.Enqueue(now, q)
		if de := (*DeadlineError)(nil); !errors.As(err, &de) || de.Wait != wait {
			return nil, fmt.Errorf("Enqueue = %v, want a DeadlineError with wait %v", err, wait)
		}
		return nil, nil
	}}
}

// granted enqueues a request of tenant for each id, each granted on a.
func granted(tenant string, ids ...uint64) []tstep {
	out := enqMany(tenant, 1, ids...)
	for i, id := range ids {
		out[i].want = []string{fmt.Sprintf("%da", id)}
	}
	return out
}

// at puts every step at d.
func at(d time.Duration, sts ...tstep) []tstep {
	for i := range sts {
		sts[i].at = d
	}
	return sts
}

func dl(d time.Duration) time.Time { return t0.Add(d) }

// TestShareDeadlines: the deadline check's predicted wait with shares, on
// an injected clock. A capped tenant waits for its own slots to end, not
// the window's; a tenant whose min share keeps slots free for it waits
// behind nobody else's.
func TestShareDeadlines(t *testing.T) {
	t.Parallel()
	s, ms := time.Second, time.Millisecond
	heavyCap := Settings{Shares: map[string]Share{"heavy": {Max: 0.5}}}
	lightMin := Settings{Shares: map[string]Share{"light": {Min: 0.2}}}
	tests := []struct {
		name  string
		s     Settings
		steps []tstep
	}{
		{"a capped tenant's waiter waits for its own slots", heavyCap, steps(
			warmT(10), // 10 slots/s one at a time; heavy's cap ceil(0.5 × 10) = 5
			at(s,
				tstep{act: enqT(1, "heavy", 1), want: []string{"1a"}}, tstep{act: enqT(2, "heavy", 1), want: []string{"2a"}},
				tstep{act: enqT(3, "heavy", 1), want: []string{"3a"}}, tstep{act: enqT(4, "heavy", 1), want: []string{"4a"}},
				tstep{act: enqT(5, "heavy", 1), want: []string{"5a"}},
				tstep{act: enqT(101, "light", 1), want: []string{"101a"}}, tstep{act: enqT(102, "light", 1), want: []string{"102a"}},
				tstep{act: enqT(6, "heavy", 1)}, tstep{act: enqT(7, "heavy", 1)}, // at its cap with 3 slots free
				// its 2 ahead and itself, 3 of its own slots must end; 7 running give slots back
				// at 70/s, its 5 of them at 50/s: 60 ms (the window alone would say 3 at 70/s)
				tstep{act: waitT(Request{ID: 8, Tenant: "heavy", Deadline: dl(s + 50*ms)}, 60*ms)},
				// light is not capped and the window has room: it starts at once
				tstep{act: enqR(Request{ID: 103, Tenant: "light", Deadline: dl(s + 200*ms)}), want: []string{"103a"}},
			),
			[]tstep{
				{at: s + 100*ms, act: rel(101), want: nil}, // a light slot: heavy is still at its cap
				{at: s + 100*ms, act: rel(1), want: []string{"6a"}},
			},
		)},
		{"a capped tenant below its cap waits as the window says", heavyCap, steps(
			warmT(4), // cap 2
			at(s,
				tstep{act: enqT(1, "heavy", 1), want: []string{"1a"}},
				tstep{act: enqT(101, "light", 1), want: []string{"101a"}}, tstep{act: enqT(102, "light", 1), want: []string{"102a"}},
				tstep{act: enqT(103, "light", 1), want: []string{"103a"}},
				// heavy holds 1 of its 2: the cap does not bind; 1 slot of the window, whose 4
				// running give slots back at 40/s: 25 ms
				tstep{act: waitT(Request{ID: 2, Tenant: "heavy", Deadline: dl(s + 20*ms)}, 25*ms)},
			),
		)},
		{"a larger request than its cap waits for all its tenant's slots, no more", heavyCap, steps(
			warmT(4), // cap 2
			at(s,
				tstep{act: enqT(1, "heavy", 1), want: []string{"1a"}}, tstep{act: enqT(2, "heavy", 1), want: []string{"2a"}},
				tstep{act: enqT(101, "light", 1), want: []string{"101a"}}, tstep{act: enqT(102, "light", 1), want: []string{"102a"}},
				// 3 sequences > its cap of 2: it runs once heavy holds nothing, 2 of its slots ending
				// at 40/s × 2/4: 100 ms (the window alone would say its 3 slots at 40/s: 75 ms)
				tstep{act: waitT(Request{ID: 3, Tenant: "heavy", Seqs: 3, Deadline: dl(s + 90*ms)}, 100*ms)},
			),
		)},
		{"slots kept for a min share put nobody else ahead", lightMin, steps(
			warmT(10), // floor(0.2 × 10) = 2 kept for light
			at(s, granted("heavy", 1, 2, 3, 4, 5, 6, 7, 8)...),
			at(s, enqMany("heavy", 1, 9, 10, 11)...), // 2 slots free, both light's
			at(s,
				tstep{act: win("a", 8)}, // cut: 1 kept for light, heavy's 8 fill the window
				tstep{act: enqR(Request{ID: 201, Tenant: "x", Priority: 1})},
				// 8 running give slots back at 80/s. Without the reservation: x's 1 above, 1 of
				// heavy's 3 (1 × 1/1), itself: 37.5 ms; with it the first slot that ends is
				// light's: 12.5 ms
				tstep{act: waitT(Request{ID: 101, Tenant: "light", Deadline: dl(s + 10*ms)}, 12500*time.Microsecond)},
				tstep{act: enqR(Request{ID: 102, Tenant: "light", Deadline: dl(s + 100*ms)})},
				// light's 102 ahead and itself need 2 kept slots, there is 1: as without shares,
				// x's 1 above, 2 of heavy's 3 (2 × 1/1), 102 and itself: 5 slots, 62.5 ms
				tstep{act: waitT(Request{ID: 103, Tenant: "light", Deadline: dl(s + 50*ms)}, 62500*time.Microsecond)},
			),
			// the first slot that ends goes to light, before x's higher priority
			[]tstep{{at: s + 100*ms, act: rel(1), want: []string{"102a"}}},
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runTenantSteps(t, tt.s, tt.steps)
		})
	}
}
