package queue

import (
	"context"
	"errors"
	"testing"
)

// Enter is Acquire in two steps: a slot at once while a window has room,
// a refusal at once, or else a Waiter that Wait grants when room frees up
// or removes when its context ends.
func TestEnterThenWait(t *testing.T) {
	t.Parallel()
	q := newQueue(t, Settings{MaxTokens: 100}, map[string]int{"a": 1})
	held, w, err := q.Enter(Request{Tokens: 10})
	if err != nil || held == nil || w != (Waiter{}) {
		t.Fatalf("Enter with room = %v, %+v, %v; want a slot and no waiter", held, w, err)
	}
	if s, w, err := q.Enter(Request{Tokens: 101}); !errors.Is(err, ErrTooLarge) || s != nil || w != (Waiter{}) {
		t.Fatalf("Enter past MaxTokens = %v, %+v, %v; want ErrTooLarge", s, w, err)
	}
	s, w, err := q.Enter(Request{Tokens: 10})
	if err != nil || s != nil || q.Stats().Length != 1 {
		t.Fatalf("Enter on a full window = %v, %v with %d waiting; want a waiter", s, err, q.Stats().Length)
	}
	held.Release()
	if s, err = w.Wait(t.Context()); err != nil || s.Upstream() != "a" {
		t.Fatalf("Wait after a release = %v, %v; want the slot on a", s, err)
	}
	_, w, _ = q.Enter(Request{Tokens: 10})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if got, err := w.Wait(ctx); got != nil || !errors.Is(err, context.Canceled) || q.Stats().Length != 0 {
		t.Fatalf("Wait with its context ended = %v, %v with %d waiting; want canceled, none waiting", got, err, q.Stats().Length)
	}
	s.Release()
	if n := inflight(q, "a"); n != 0 {
		t.Errorf("in flight at the end = %d, want 0", n)
	}
}
