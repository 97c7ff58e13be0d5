package queue

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// newQueue returns a Queue with the given windows ("name", limit, ...).
func newQueue(t *testing.T, s Settings, windows map[string]int) *Queue {
	t.Helper()
	q, err := New(s)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	for name, limit := range windows {
		q.SetWindow(name, limit)
	}
	return q
}

func inflight(q *Queue, name string) int {
	for _, w := range q.Stats().Windows {
		if w.Name == name {
			return w.InFlight
		}
	}
	return -1
}

func TestAcquireGrantsAtOnce(t *testing.T) {
	t.Parallel()
	q := newQueue(t, Settings{}, map[string]int{"a": 1, "b": 2})
	s, err := q.Acquire(t.Context(), Request{Tokens: 10})
	if err != nil || s.Upstream() != "b" {
		t.Fatalf("Acquire() = %v, %v, want a slot on b", s, err)
	}
	s.Release()
	s.Release() // no-op
	if got := inflight(q, "b"); got != 0 {
		t.Fatalf("in-flight after two Release = %d, want 0", got)
	}
}

func TestAcquireErrors(t *testing.T) {
	t.Parallel()
	done, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name   string
		maxLen int
		ctx    context.Context
		r      Request
		want   error
	}{
		{name: "too large", maxLen: 2, ctx: t.Context(), r: Request{Tokens: 101}, want: ErrTooLarge},
		{name: "tokens full", maxLen: 2, ctx: t.Context(), r: Request{Tokens: 51}, want: ErrTokensFull},
		{name: "full", maxLen: 1, ctx: t.Context(), r: Request{Tokens: 1}, want: ErrFull},
		{name: "ctx already done", maxLen: 2, ctx: done, r: Request{Tokens: 1}, want: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				q := newQueue(t, Settings{MaxLength: tt.maxLen, MaxTokens: 100}, map[string]int{"a": 1})
				held, _ := q.Acquire(t.Context(), Request{})
				defer held.Release()
				ctx, stop := context.WithCancel(t.Context())
				go q.Acquire(ctx, Request{Tokens: 50}) // the one waiter
				synctest.Wait()
				if _, err := q.Acquire(tt.ctx, tt.r); !errors.Is(err, tt.want) {
					t.Errorf("Acquire(%+v) = %v, want %v", tt.r, err, tt.want)
				}
				if s := q.Stats(); s.Length != 1 || s.Windows[0].InFlight != 1 {
					t.Errorf("Stats() = %+v after a refusal, want the one waiter and one held slot", s)
				}
				stop()
			})
		})
	}
}

func TestAcquireStopsAtDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, Settings{}, map[string]int{"a": 1})
		held, _ := q.Acquire(t.Context(), Request{})
		defer held.Release()
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if s, err := q.Acquire(ctx, Request{}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire() = %v, %v, want DeadlineExceeded", s, err)
		}
		if waited := time.Since(start); waited != 30*time.Second {
			t.Errorf("waited %v, want 30s", waited) // fake time
		}
		if n := q.Stats().Length; n != 0 {
			t.Errorf("Length = %d after the deadline, want 0", n)
		}
	})
}

func TestAcquireCancelled(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, Settings{}, map[string]int{"a": 1})
		held, _ := q.Acquire(t.Context(), Request{})
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error)
		go func() {
			_, err := q.Acquire(ctx, Request{})
			errc <- err
		}()
		synctest.Wait()
		if n := q.Stats().Length; n != 1 {
			t.Fatalf("Length = %d, want 1 waiter", n)
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire() = %v, want Canceled", err)
		}
		if n := q.Stats().Length; n != 0 {
			t.Fatalf("Length = %d after cancel, want 0", n)
		}
		held.Release()
		if got := inflight(q, "a"); got != 0 {
			t.Fatalf("in-flight = %d, want 0: the cancelled waiter must not be granted", got)
		}
	})
}

// TestWaitersWake checks each way room appears: a release, a bigger window,
// a window back in service, a new window.
func TestWaitersWake(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		make func(q *Queue, held *Slot)
		want string
	}{
		{name: "release", make: func(_ *Queue, held *Slot) { held.Release() }, want: "a"},
		{name: "window grows", make: func(q *Queue, _ *Slot) { q.SetWindow("a", 2) }, want: "a"},
		{name: "available again", make: func(q *Queue, _ *Slot) { q.SetAvailability(nil) }, want: "b"},
		{name: "new window", make: func(q *Queue, _ *Slot) { q.SetWindow("c", 1) }, want: "c"},
		{name: "removed window holds its slot", make: func(q *Queue, held *Slot) {
			q.RemoveWindow("a")
			held.Release()
			q.SetWindow("c", 1)
		}, want: "c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				q := newQueue(t, Settings{}, map[string]int{"a": 1, "b": 1})
				q.SetAvailability(func(name string) Availability {
					if name == "b" {
						return Paused
					}
					return Available
				})
				q.setOrder(ShortestFirst)
				held, _ := q.Acquire(t.Context(), Request{})
				got := make(chan *Slot)
				go func() {
					s, err := q.Acquire(t.Context(), Request{})
					if err != nil {
						t.Errorf("Acquire() = %v", err)
					}
					got <- s
				}()
				synctest.Wait()
				tt.make(q, held)
				if s := <-got; s.Upstream() != tt.want {
					t.Errorf("waiter got %s, want %s", s.Upstream(), tt.want)
				}
			})
		})
	}
}

// TestGrantCancelRace makes a grant and the end of ctx meet: whichever the
// select picks, the slot is either returned or released, never leaked.
func TestGrantCancelRace(t *testing.T) {
	t.Parallel()
	for range 200 {
		q := newQueue(t, Settings{}, map[string]int{"a": 1})
		held, _ := q.Acquire(t.Context(), Request{})
		_, id, ch, err := q.enqueue(time.Now(), Request{})
		if err != nil || ch == nil {
			t.Fatalf("enqueue() = %v, %v, want a waiter", ch, err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		held.Release() // grants the waiter: ch now holds its slot
		s, err := q.wait(ctx, id, ch)
		switch {
		case err == nil && inflight(q, "a") == 1:
			s.Release()
		case errors.Is(err, context.Canceled) && inflight(q, "a") == 0:
		default:
			t.Fatalf("wait() = %v, %v with in-flight %d: slot leaked or lost", s, err, inflight(q, "a"))
		}
	}
}

func TestDrain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		errDraining := errors.New("draining")
		q := newQueue(t, Settings{}, map[string]int{"a": 1})
		held, _ := q.Acquire(t.Context(), Request{})
		errc := make(chan error, 3)
		for range 3 {
			go func() {
				_, err := q.Acquire(t.Context(), Request{})
				errc <- err
			}()
		}
		synctest.Wait()
		q.Drain(errDraining)
		for range 3 {
			if err := <-errc; !errors.Is(err, errDraining) {
				t.Fatalf("waiter got %v, want %v", err, errDraining)
			}
		}
		held.Release()
		if _, err := q.Acquire(t.Context(), Request{}); !errors.Is(err, errDraining) {
			t.Fatalf("Acquire() after Drain = %v, want %v", err, errDraining)
		}
		if got := inflight(q, "a"); got != 0 {
			t.Fatalf("in-flight = %d, want 0", got)
		}
		q2 := newQueue(t, Settings{}, nil)
		q2.Drain(nil)
		if _, err := q2.Acquire(t.Context(), Request{}); !errors.Is(err, ErrClosed) {
			t.Fatalf("Acquire() after Drain(nil) = %v, want ErrClosed", err)
		}
	})
}

func TestQueueUpdateSettings(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, Settings{MaxLength: 2}, map[string]int{"a": 1})
		held, _ := q.Acquire(t.Context(), Request{})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		for range 2 {
			go q.Acquire(ctx, Request{})
		}
		synctest.Wait()
		if err := q.UpdateSettings(Settings{MaxLength: 1}); err != nil {
			t.Fatalf("UpdateSettings() = %v", err)
		}
		if n := q.Stats().Length; n != 2 {
			t.Fatalf("Length = %d after lowering MaxLength, want 2", n)
		}
		if _, err := q.Acquire(ctx, Request{}); !errors.Is(err, ErrFull) {
			t.Fatalf("Acquire() = %v, want ErrFull", err)
		}
		if err := q.UpdateSettings(Settings{StarvationAfter: -1}); err == nil {
			t.Fatal("UpdateSettings(StarvationAfter -1) = nil, want an error")
		}
		cancel()
		synctest.Wait()
		held.Release()
	})
}

// TestHammer runs many goroutines that acquire with random deadlines, hold a
// slot for a while and release it, while another flips availability and
// order. Held slots never exceed a window's limit; at the end nothing is held
// or waiting. Run it with -race.
func TestHammer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		limits := map[string]int{"a": 3, "b": 2}
		q := newQueue(t, Settings{MaxLength: 40, StarvationAfter: 50 * time.Millisecond}, limits)
		held := map[string]*atomic.Int32{"a": {}, "b": {}}
		var granted, refused atomic.Int32
		var wg sync.WaitGroup
		for w := range 32 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), 1))
				for range 100 {
					ctx, cancel := context.WithTimeout(t.Context(), time.Duration(r.IntN(200))*time.Millisecond)
					s, err := q.Acquire(ctx, Request{Tokens: r.Int64N(1000)})
					cancel()
					if err != nil {
						refused.Add(1)
						continue
					}
					granted.Add(1)
					if n := held[s.Upstream()].Add(1); int(n) > limits[s.Upstream()] {
						t.Errorf("%d slots held on %s, limit %d", n, s.Upstream(), limits[s.Upstream()])
					}
					if rs := q.Ranked(nil, Request{}, s.Upstream(), 2); len(rs) > 1 || len(rs) == 1 && rs[0].Upstream == s.Upstream() {
						t.Errorf("Ranked besides %s = %v, want at most the other window", s.Upstream(), rs)
					}
					time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond) // work, in fake time
					held[s.Upstream()].Add(-1)
					s.Release()
				}
			})
		}
		stop := make(chan struct{})
		var flips sync.WaitGroup
		var aState atomic.Int32 // what the availability func says of "a"
		q.SetAvailability(func(name string) Availability {
			if name == "a" {
				return Availability(aState.Load())
			}
			return Available
		})
		flips.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					aState.Store(int32(Available))
					q.Dispatch()
					return
				case <-time.After(7 * time.Millisecond):
				}
				aState.Store(int32(i % 3)) // available, paused, down in turn
				q.Dispatch()
				q.setOrder(Order(i % 2))
				_ = q.Stats()
			}
		})
		wg.Wait()
		close(stop)
		flips.Wait()
		s := q.Stats()
		if s.Length != 0 || s.Tokens != 0 || s.Windows[0].InFlight != 0 || s.Windows[1].InFlight != 0 {
			t.Fatalf("Stats() = %+v at the end, want empty", s)
		}
		if granted.Load() == 0 || refused.Load() == 0 {
			t.Errorf("granted %d, refused %d: the hammer missed a path", granted.Load(), refused.Load())
		}
	})
}
