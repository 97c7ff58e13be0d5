package breaker

import (
	"strings"
	"sync"
	"testing"
	"time"
)

func newTestSlow(t testing.TB, clk *fakeClock) *Slow {
	t.Helper()
	sl, err := NewSlow(SlowSettings{
		Level:  LevelSettings{Rules: testRules(), Hysteresis: 0.05, Hold: 5 * time.Second},
		Window: WindowSettings{MaxInflight: 100, MinInflight: 10},
		Now:    clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return sl
}

func TestSlowSteps(t *testing.T) {
	t.Parallel()
	const s = time.Second
	type step struct {
		advance  time.Duration
		readings []Reading
		busy     bool
		want     SlowState
		changed  string // "level", "limit", "phase" joined by +, in that order
		allowErr bool
	}
	steps := []step{
		{readings: frag(1.0), want: SlowState{Normal, PhaseNormal, 100}},
		{advance: s, readings: frag(1.3), want: SlowState{Degraded, PhaseDegraded, 80}, changed: "level+limit+phase"},
		{advance: 2 * s, readings: frag(1.4), want: SlowState{Degraded, PhaseDegraded, 64}, changed: "limit"},
		{advance: s, readings: frag(1.5), want: SlowState{Critical, PhaseCritical, 51}, changed: "level+limit+phase", allowErr: true},
		{advance: s, readings: frag(1.0), busy: true, want: SlowState{Critical, PhaseCritical, 51}, allowErr: true},
		{advance: 5 * s, readings: frag(1.0), busy: true, want: SlowState{Normal, PhaseRecovering, 51}, changed: "level+phase"},
		{advance: 5 * s, readings: frag(1.0), busy: true, want: SlowState{Normal, PhaseRecovering, 100}, changed: "limit"},
		{advance: s, readings: frag(1.0), want: SlowState{Normal, PhaseNormal, 100}, changed: "phase"},
	}
	clk := newFakeClock()
	sl := newTestSlow(t, clk)
	for i, st := range steps {
		clk.Advance(st.advance)
		u := sl.Observe(st.readings, !st.busy)
		if u.SlowState != st.want {
			t.Errorf("step %d: Observe(%v) = %+v, want %+v", i, st.readings, u.SlowState, st.want)
		}
		var changed []string
		for _, c := range []struct {
			ok   bool
			name string
		}{{u.LevelChanged, "level"}, {u.LimitChanged, "limit"}, {u.PhaseChanged, "phase"}} {
			if c.ok {
				changed = append(changed, c.name)
			}
		}
		if got := strings.Join(changed, "+"); got != st.changed {
			t.Errorf("step %d: changed = %q, want %q", i, got, st.changed)
		}
		if got := sl.Current(); got != st.want {
			t.Errorf("step %d: Current() = %+v, want %+v", i, got, st.want)
		}
		if refuses := sl.Current().Level == Critical; refuses != st.allowErr {
			t.Errorf("step %d: critical = %v, want %v", i, refuses, st.allowErr)
		}
	}
}

// TestSlowCreepDoesNotCut: with the default Worsening (1 %) a degraded
// signal creeping by noise keeps the window where the first cut put it.
func TestSlowCreepDoesNotCut(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	sl := newTestSlow(t, clk)
	v := 1.25
	for range 100 {
		clk.Advance(2 * time.Second)
		v += 0.0001
		sl.Observe(frag(v), true)
	}
	if got := sl.Current(); got != (SlowState{Degraded, PhaseDegraded, 80}) {
		t.Errorf("after 100 readings creeping from 1.25 to %.4f: %+v, want degraded at 80", v, got)
	}
	clk.Advance(2 * time.Second)
	if u := sl.Observe(frag(v*1.06), true); u.Limit != 64 {
		t.Errorf("a 6 %% rise: limit %d, want 64", u.Limit)
	}
}

func TestSlowUpdate(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	sl := newTestSlow(t, clk)
	sl.Observe(frag(1.6), true) // critical, window 64
	err := sl.Update(SlowSettings{
		Level:  LevelSettings{Rules: testRules(), Hysteresis: 0.05, Hold: 5 * time.Second},
		Window: WindowSettings{MaxInflight: 50, MinInflight: 10},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sl.Current(), (SlowState{Critical, PhaseCritical, 50}); got != want {
		t.Fatalf("Current() after Update = %+v, want %+v", got, want)
	}
	err = sl.Update(SlowSettings{Level: LevelSettings{Hold: -1}})
	for _, field := range []string{"LevelSettings.Hold", "WindowSettings.MaxInflight"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Update(invalid) = %v, want an error naming %s", err, field)
		}
	}
	if got, want := sl.Current(), (SlowState{Critical, PhaseCritical, 50}); got != want {
		t.Fatalf("Current() after a refused Update = %+v, want %+v", got, want)
	}
}

func TestNewSlowRejectsInvalidSettings(t *testing.T) {
	t.Parallel()
	_, err := NewSlow(SlowSettings{Level: LevelSettings{Rules: []Rule{{Signal: ""}}}, Window: WindowSettings{MaxInflight: 1, Cut: 2}})
	for _, field := range []string{"LevelSettings.Rules[0].Signal", "WindowSettings.Cut"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("NewSlow(invalid) = %v, want an error naming %s", err, field)
		}
	}
}

func TestSlowConcurrent(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	sl := newTestSlow(t, clk)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if st := sl.Current(); st.Limit < 10 || st.Limit > 100 {
					t.Errorf("Current() = %+v, limit out of [10, 100]", st)
					return
				}
				_ = sl.Current()
			}
		})
	}
	values := []float64{1.0, 1.3, 1.6, 1.1, 1.0, 1.45, 1.2}
	for i := range 2000 {
		clk.Advance(300 * time.Millisecond)
		sl.Observe(frag(values[i%len(values)]), i%3 == 0)
	}
	close(stop)
	wg.Wait()
}

func TestSlowStatePacking(t *testing.T) {
	t.Parallel()
	for _, st := range []SlowState{{Normal, PhaseNormal, 1}, {Critical, PhaseRecovering, 1<<31 - 1}, {Degraded, PhaseCritical, 256}} {
		if got := unpack(st.pack()); got != st {
			t.Errorf("unpack(pack(%+v)) = %+v", st, got)
		}
	}
}

// BenchmarkSlowAllow measures the per-request read of the slow breaker.
func BenchmarkSlowAllow(b *testing.B) {
	sl := newTestSlow(b, newFakeClock())
	b.Run("current/serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if sl.Current().Limit == 0 {
				b.Fatal("zero limit")
			}
		}
	})
	b.Run("current/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if sl.Current().Level == Critical {
					b.Error("critical at normal")
					return
				}
			}
		})
	})
	b.Run("observe/serial", func(b *testing.B) {
		b.ReportAllocs()
		readings := []Reading{rd("fragmentation", 1.1), rd("kv_cache_usage", 0.9), rd("memory_used", 0.8)}
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for b.Loop() {
			now = now.Add(500 * time.Millisecond)
			sl.ObserveAt(now, readings, true)
		}
	})
}

// TestSlowQueueSignal: with a QueueSignal, the pod's own waiting requests
// (fresh readings only) cut a degraded window again; without one they are
// just another reading.
func TestSlowQueueSignal(t *testing.T) {
	t.Parallel()
	const s = time.Second
	for _, tt := range []struct {
		name, signal string
		stale        bool
		want         int
	}{
		{"queue signal set", "waiting", false, 64},
		{"stale reading", "waiting", true, 80},
		{"no queue signal", "", false, 80},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := newFakeClock()
			sl, err := NewSlow(SlowSettings{
				Level:       LevelSettings{Rules: testRules(), Hysteresis: 0.05, Hold: 5 * time.Second},
				Window:      WindowSettings{MaxInflight: 100, MinInflight: 10},
				Now:         clk.Now,
				QueueSignal: tt.signal,
			})
			if err != nil {
				t.Fatal(err)
			}
			sl.Observe(frag(1.3), true) // degraded: 80
			clk.Advance(2 * s)
			rs := append(frag(1.3), Reading{Signal: "waiting", Value: 20, Stale: tt.stale})
			if got := sl.Observe(rs, true).Limit; got != tt.want {
				t.Errorf("limit %d with 20 waiting in the pod, want %d", got, tt.want)
			}
		})
	}
}

// A failure ceiling survives a reload that keeps the pod's maximum (clamped
// into the new bounds) and goes with one that changes it: a new maximum is
// the operator's word on the window.
func TestSlowFailCeilingAcrossUpdates(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	sl := newTestSlow(t, clk) // max 100, min 10
	if !sl.Fail(clk.Now(), 90) {
		t.Fatal("Fail(90 of 100) set no ceiling")
	}
	if got := sl.Current().Limit; got != 72 {
		t.Fatalf("limit after Fail(90) = %d, want 72 at once", got)
	}
	keep := SlowSettings{Level: LevelSettings{Rules: testRules(), Hysteresis: 0.05, Hold: 5 * time.Second},
		Window: WindowSettings{MaxInflight: 100, MinInflight: 80}}
	if err := sl.Update(keep); err != nil {
		t.Fatal(err)
	}
	if c, _ := sl.Ceiling(); c != 80 || sl.Current().Limit != 80 {
		t.Errorf("after a reload with min 80: ceiling %d, limit %d; want both clamped to 80", c, sl.Current().Limit)
	}
	keep.Window.MaxInflight = 120
	if err := sl.Update(keep); err != nil {
		t.Fatal(err)
	}
	if c, _ := sl.Ceiling(); c != 0 {
		t.Errorf("after a reload that changed max_inflight: ceiling %d, want none", c)
	}
}
