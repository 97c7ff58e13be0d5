package queue

import (
	"slices"
	"testing"
	"time"
)

// fakeScorer scores by a table and records every choice.
type fakeScorer struct {
	score map[string]float64
	chose []string
}

func (f *fakeScorer) Score(upstream string, _, _ int, _ []uint64) float64 { return f.score[upstream] }
func (f *fakeScorer) Chose(upstream string, _ []uint64)                   { f.chose = append(f.chose, upstream) }

func TestScorerChoosesAmongWindowsWithRoom(t *testing.T) {
	t.Parallel()
	c, err := NewCore(Settings{MaxLength: 10, MaxTokens: 1000})
	if err != nil {
		t.Fatal(err)
	}
	c.SetWindow("a", 4)
	c.SetWindow("b", 1)
	c.SetWindow("c", 2)
	now := time.Unix(0, 0)
	// Without a scorer: the most room.
	if g, ok, _ := c.Enqueue(now, Request{ID: 1}); !ok || g.Upstream != "a" {
		t.Fatalf("no scorer: %+v %v, want a", g, ok)
	}
	s := &fakeScorer{score: map[string]float64{"a": 0.1, "b": 0.9, "c": 0.5}}
	c.SetScorer(s)
	steps := []string{"b", "c", "c", "a", "a", "a"} // b full after one, then c, then a
	for i, want := range steps {
		g, ok, err := c.Enqueue(now, Request{ID: uint64(i + 2)})
		if err != nil || !ok || g.Upstream != want {
			t.Fatalf("request %d: %+v %v %v, want %s", i+2, g, ok, err, want)
		}
	}
	// Everything is full: the next waits, and a release grants it where
	// the room is, telling the scorer.
	if _, ok, err := c.Enqueue(now, Request{ID: 9}); ok || err != nil {
		t.Fatalf("full: granted %v, err %v", ok, err)
	}
	gs := c.Release(now, "c", Cost{Seqs: 1})
	if len(gs) != 1 || gs[0].Upstream != "c" {
		t.Fatalf("release: %+v", gs)
	}
	if want := append(slices.Clone(steps), "c"); !slices.Equal(s.chose, want) {
		t.Fatalf("scorer told %v, want %v", s.chose, want)
	}
	// A window that is not available is never scored into a grant.
	c.SetAvailability(func(u string) Availability {
		if u == "b" {
			return Paused
		}
		return Available
	})
	c.Release(now, "b", Cost{Seqs: 1})
	if g, ok, _ := c.Enqueue(now, Request{ID: 10}); ok {
		t.Fatalf("granted %+v on a paused window", g)
	}
}
