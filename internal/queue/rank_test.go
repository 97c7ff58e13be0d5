package queue

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// rankCore has windows a (4 slots), b (1), c (2), d (3) and e (2), none in
// flight; e's memory budget is 100.
func rankCore(t *testing.T) *Core {
	t.Helper()
	c, err := NewCore(Settings{MaxLength: 10, MaxTokens: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for name, limit := range map[string]int{"a": 4, "b": 1, "c": 2, "d": 3, "e": 2} {
		c.SetWindow(name, limit)
	}
	c.SetMemoryBudget("e", 100)
	return c
}

func TestRanked(t *testing.T) {
	t.Parallel()
	tied := map[string]float64{"a": 0.5, "b": 0.9, "c": 0.5, "d": 0.5, "e": 0.2}
	tests := []struct {
		name   string
		scores map[string]float64 // nil: no Scorer
		paused string             // a window not available
		r      Request
		chosen string
		n      int
		want   []Candidate
	}{
		{name: "no scorer: by room, then name", r: Request{}, chosen: "a", n: 4,
			want: []Candidate{{"d", 0, 3}, {"c", 0, 2}, {"e", 0, 2}, {"b", 0, 1}}},
		{name: "by score; ties by room, then name", scores: tied, chosen: "e", n: 4,
			want: []Candidate{{"b", 0.9, 1}, {"a", 0.5, 4}, {"d", 0.5, 3}, {"c", 0.5, 2}}},
		{name: "at most n", scores: tied, chosen: "b", n: 2,
			want: []Candidate{{"a", 0.5, 4}, {"d", 0.5, 3}}},
		{name: "n of 0 ranks nothing", scores: tied, chosen: "b", n: 0},
		{name: "excluded windows are not ranked", scores: tied, r: Request{Exclude: []string{"b", "a"}}, chosen: "d", n: 4,
			want: []Candidate{{"c", 0.5, 2}, {"e", 0.2, 2}}},
		{name: "a paused window is not ranked", scores: tied, paused: "b", chosen: "a", n: 4,
			want: []Candidate{{"d", 0.5, 3}, {"c", 0.5, 2}, {"e", 0.2, 2}}},
		{name: "a window whose budget the request does not fit is not ranked", scores: tied, r: Request{Memory: 200},
			chosen: "a", n: 5, want: []Candidate{{"b", 0.9, 1}, {"d", 0.5, 3}, {"c", 0.5, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := rankCore(t)
			if tt.scores != nil {
				c.SetScorer(&fakeScorer{score: tt.scores})
			}
			c.SetAvailability(func(u string) Availability {
				if u == tt.paused {
					return Paused
				}
				return Available
			})
			prefix := []Candidate{{Upstream: "kept"}}
			got := c.Ranked(slices.Clone(prefix), tt.r, tt.chosen, tt.n)
			if want := append(prefix, tt.want...); !slices.Equal(got, want) {
				t.Fatalf("Ranked(chosen %s, n %d) = %v, want %v", tt.chosen, tt.n, got, want)
			}
		})
	}
}

// A full window is not ranked, and ranking takes nothing: the scorer is
// told nothing and every window keeps its room.
func TestRankedTakesNothing(t *testing.T) {
	t.Parallel()
	c := rankCore(t)
	s := &fakeScorer{score: map[string]float64{"a": 0.1, "b": 0.9}}
	c.SetScorer(s)
	now := time.Unix(0, 0)
	g, ok, err := c.Enqueue(now, Request{ID: 1})
	if err != nil || !ok || g.Upstream != "b" || !g.Scored || g.Score != 0.9 {
		t.Fatalf("Enqueue = %+v %v %v, want b, scored 0.9", g, ok, err)
	}
	got := c.Ranked(nil, Request{}, "", 10)
	want := []Candidate{{"a", 0.1, 4}, {"d", 0, 3}, {"c", 0, 2}, {"e", 0, 2}} // b is full
	if !slices.Equal(got, want) {
		t.Fatalf("Ranked = %v, want %v", got, want)
	}
	if c.InFlight("a") != 0 || len(s.chose) != 1 {
		t.Fatalf("after Ranked: a holds %d, scorer told %v; want nothing taken", c.InFlight("a"), s.chose)
	}
}

// A grant carries the score that chose it, also from a dispatch, and so
// does its slot; without a Scorer there is none.
func TestGrantScore(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q, err := New(Settings{MaxLength: 10, MaxTokens: 1000})
		if err != nil {
			t.Fatal(err)
		}
		q.SetWindow("a", 1)
		s, err := q.Acquire(t.Context(), Request{})
		if err != nil {
			t.Fatal(err)
		}
		if score, ok := s.Score(); ok || score != 0 {
			t.Fatalf("no scorer: Score() = %v, %v; want none", score, ok)
		}
		q.SetScorer(&fakeScorer{score: map[string]float64{"a": 0.75}})
		ch := make(chan *Slot)
		go func() {
			s, _ := q.Acquire(t.Context(), Request{}) // waits for a's slot
			ch <- s
		}()
		synctest.Wait() // the second request waits
		s.Release()     // and the release dispatches it
		next := <-ch
		if score, ok := next.Score(); !ok || score != 0.75 {
			t.Fatalf("dispatched: Score() = %v, %v; want 0.75", score, ok)
		}
		next.Release()
		if got := q.Ranked(nil, Request{}, "", 1); !slices.Equal(got, []Candidate{{"a", 0.75, 1}}) {
			t.Fatalf("Queue.Ranked = %v, want a", got)
		}
	})
}
