package breaker

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestNewErrorBreakerRejectsInvalidSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		s     ErrorSettings
		field string
	}{
		{"negative failures", ErrorSettings{Failures: -1}, "ErrorSettings.Failures"},
		{"negative open for", ErrorSettings{OpenFor: -time.Second}, "ErrorSettings.OpenFor"},
		{"negative half open", ErrorSettings{HalfOpenRequests: -1}, "ErrorSettings.HalfOpenRequests"},
		{"huge half open", ErrorSettings{HalfOpenRequests: 1 << 33}, "ErrorSettings.HalfOpenRequests"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewErrorBreaker(tt.s); err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("NewErrorBreaker(%+v) = %v, want an error naming %s", tt.s, err, tt.field)
			}
		})
	}
}

// breakerStep sleeps (fake time), then either takes a request through with
// outcome, or, with hold set, takes one and keeps it in flight. wantErr is
// the Allow error; changes are the OnChange calls this step must cause.
type breakerStep struct {
	sleep   time.Duration
	outcome Outcome
	hold    bool
	finish  bool // report Success for the oldest held request instead
	wantErr error
	state   State
	changes string
}

func TestErrorBreakerSteps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		s     ErrorSettings
		steps []breakerStep
	}{
		{
			name: "defaults open after five failures and close after two probes",
			steps: []breakerStep{
				{outcome: Failure, state: Closed}, {outcome: Failure, state: Closed},
				{outcome: Failure, state: Closed}, {outcome: Failure, state: Closed},
				{outcome: Failure, state: Open, changes: "closed→open"},
				{wantErr: errOpen, state: Open},
				{sleep: 9 * time.Second, wantErr: errOpen, state: Open},
				{sleep: time.Second + time.Nanosecond, hold: true, state: HalfOpen, changes: "open→half-open"},
				{hold: true, state: HalfOpen},
				{wantErr: errProbing, state: HalfOpen},
				{finish: true, state: HalfOpen},
				{finish: true, state: Closed, changes: "half-open→closed"},
			},
		},
		{
			name: "a success resets the consecutive count",
			s:    ErrorSettings{Failures: 2},
			steps: []breakerStep{
				{outcome: Failure, state: Closed},
				{outcome: Success, state: Closed},
				{outcome: Failure, state: Closed},
				{outcome: Failure, state: Open, changes: "closed→open"},
			},
		},
		{
			name: "excluded outcomes count as neither",
			s:    ErrorSettings{Failures: 2},
			steps: []breakerStep{
				{outcome: Failure, state: Closed},
				{outcome: Excluded, state: Closed},
				{outcome: Excluded, state: Closed},
				{outcome: Failure, state: Open, changes: "closed→open"},
			},
		},
		{
			name: "a failed probe reopens",
			s:    ErrorSettings{Failures: 1, OpenFor: time.Second, HalfOpenRequests: 1},
			steps: []breakerStep{
				{outcome: Failure, state: Open, changes: "closed→open"},
				{sleep: 2 * time.Second, outcome: Failure, state: Open, changes: "open→half-open half-open→open"},
				{wantErr: errOpen, state: Open},
				{sleep: 2 * time.Second, outcome: Success, state: Closed, changes: "open→half-open half-open→closed"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var changes []string
				tt.s.OnChange = func(from, to State) { changes = append(changes, from.String()+"→"+to.String()) }
				b, err := NewErrorBreaker(tt.s)
				if err != nil {
					t.Fatal(err)
				}
				var held []func(Outcome)
				for i, st := range tt.steps {
					time.Sleep(st.sleep)
					changes = changes[:0]
					switch {
					case st.finish:
						held[0](Success)
						held = held[1:]
					default:
						done, err := b.Allow()
						if !errors.Is(err, st.wantErr) {
							t.Fatalf("step %d: Allow() = %v, want %v", i, err, st.wantErr)
						}
						if err != nil {
							break
						}
						if st.hold {
							held = append(held, done)
						} else {
							done(st.outcome)
							done(Failure) // a second call is ignored
						}
					}
					if got := b.State(); got != st.state {
						t.Errorf("step %d: State() = %v, want %v", i, got, st.state)
					}
					if got := strings.Join(changes, " "); got != st.changes {
						t.Errorf("step %d: OnChange calls %q, want %q", i, got, st.changes)
					}
				}
			})
		})
	}
}

func TestErrorBreakerOnChangeMayCallState(t *testing.T) {
	t.Parallel()
	var b *ErrorBreaker
	var seen []State
	b, err := NewErrorBreaker(ErrorSettings{Failures: 1, OnChange: func(_, to State) {
		seen = append(seen, b.State()) // would deadlock if called under a lock
	}})
	if err != nil {
		t.Fatal(err)
	}
	done, err := b.Allow()
	if err != nil {
		t.Fatal(err)
	}
	done(Failure)
	if fmt.Sprint(seen) != "[open]" {
		t.Fatalf("State() seen from OnChange = %v, want [open]", seen)
	}
}

func TestErrorBreakerConcurrent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var changes []string
	b, err := NewErrorBreaker(ErrorSettings{Failures: 3, OnChange: func(from, to State) {
		mu.Lock()
		defer mu.Unlock()
		changes = append(changes, from.String()+"→"+to.String())
	}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				done, err := b.Allow()
				if err != nil {
					continue
				}
				o := Failure
				if (g+i)%4 == 0 {
					o = Excluded
				}
				done(o)
				_ = b.State()
			}
		})
	}
	wg.Wait()
	_ = b.State()
	mu.Lock()
	defer mu.Unlock()
	if len(changes) == 0 || changes[0] != "closed→open" {
		t.Fatalf("OnChange calls = %v, want to start with closed→open", changes)
	}
}

func TestStateAndOutcomeStrings(t *testing.T) {
	t.Parallel()
	got := fmt.Sprint(Closed, HalfOpen, Open, State(9), Success, Failure, Excluded, Outcome(7))
	want := "closed half-open open state(9) success failure excluded outcome(7)"
	if got != want {
		t.Fatalf("String() values = %q, want %q", got, want)
	}
}

// BenchmarkErrorBreakerAllow measures Allow plus done on a closed breaker.
func BenchmarkErrorBreakerAllow(b *testing.B) {
	eb, err := NewErrorBreaker(ErrorSettings{OnChange: func(_, _ State) {}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			done, err := eb.Allow()
			if err != nil {
				b.Fatal(err)
			}
			done(Success)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				done, err := eb.Allow()
				if err != nil {
					b.Error(err)
					return
				}
				done(Success)
			}
		})
	})
}

func TestErrorBreakerSurvivesPanickingOnChange(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var calls []string
		b, err := NewErrorBreaker(ErrorSettings{Failures: 1, OpenFor: time.Second, OnChange: func(from, to State) {
			calls = append(calls, from.String()+"→"+to.String())
			if len(calls) == 1 {
				panic("callback bug")
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		done, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() { _ = recover() }()
			done(Failure)
		}()
		time.Sleep(2 * time.Second)
		if got := b.State(); got != HalfOpen {
			t.Fatalf("State() = %v, want half-open", got)
		}
		if got := strings.Join(calls, " "); got != "closed→open open→half-open" {
			t.Fatalf("OnChange calls = %q, want delivery to go on after a panic", got)
		}
	})
}

// TestAdmitsCallsNoCallback: Admits says whether a request would pass (a
// half-open breaker with its probe out admits nothing) and never runs
// OnChange, which the admission queue's lock must not hold; the next State
// delivers the transition it revealed.
func TestAdmitsCallsNoCallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var changes []string
		b, err := NewErrorBreaker(ErrorSettings{Failures: 1, OpenFor: time.Second, HalfOpenRequests: 1,
			OnChange: func(from, to State) { changes = append(changes, from.String()+"→"+to.String()) }})
		if err != nil {
			t.Fatal(err)
		}
		done, _ := b.Allow()
		done(Failure)
		if st, ok := b.Admits(); st != Open || ok {
			t.Fatalf("Admits() = %v %v, want open, no", st, ok)
		}
		time.Sleep(time.Second + time.Millisecond)
		if st, ok := b.Admits(); st != HalfOpen || !ok || len(changes) != 1 {
			t.Fatalf("Admits() = %v %v with changes %v, want half-open with its probe free, no callback yet", st, ok, changes)
		}
		probe, _ := b.Allow() // delivers open→half-open
		if st, ok := b.Admits(); st != HalfOpen || ok {
			t.Fatalf("Admits() with the probe out = %v %v, want half-open, no", st, ok)
		}
		probe(Success)
		if st, ok := b.Admits(); st != Closed || !ok {
			t.Fatalf("Admits() after the probe = %v %v, want closed, yes", st, ok)
		}
		if got := strings.Join(changes, " "); got != "closed→open open→half-open half-open→closed" {
			t.Fatalf("changes = %s", got)
		}
	})
}

// OpenRemaining is the time an open breaker still refuses: what a client
// refused for it should wait. 0 while closed or half-open.
func TestErrorBreakerOpenRemaining(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, err := NewErrorBreaker(ErrorSettings{Failures: 1, OpenFor: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if got := b.OpenRemaining(); got != 0 {
			t.Fatalf("closed: OpenRemaining() = %v, want 0", got)
		}
		done, _ := b.Allow()
		done(Failure)
		for _, st := range []struct{ sleep, want time.Duration }{{0, 10 * time.Second}, {3 * time.Second, 7 * time.Second},
			{6 * time.Second, time.Second}, {time.Second, 0}} {
			time.Sleep(st.sleep)
			if got := b.OpenRemaining(); got != st.want {
				t.Errorf("after %v more: OpenRemaining() = %v, want %v", st.sleep, got, st.want)
			}
		}
	})
}
