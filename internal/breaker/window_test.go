package breaker

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// windowStep advances the clock, ticks, and states the limit and phase.
type windowStep struct {
	advance time.Duration
	level   Level
	signal  string // "" means "fragmentation"
	value   float64
	busy    bool    // backlog not empty
	queued  float64 // requests waiting inside the pod
	fail    int     // > 0: the pod failed with this many in flight, before the tick
	limit   int
	phase   Phase
	ceiling int // the ceiling after the tick (0: none)
}

func TestWindowSteps(t *testing.T) {
	t.Parallel()
	const s = time.Second
	base := WindowSettings{MaxInflight: 100, MinInflight: 10} // cut 0.2 every 2s, ramp 10 every 1s
	tests := []struct {
		name  string
		s     WindowSettings
		steps []windowStep
	}{
		{name: "normal stays at max", s: base, steps: []windowStep{
			{level: Normal, limit: 100, phase: PhaseNormal},
			{advance: 10 * s, level: Normal, limit: 100, phase: PhaseNormal},
		}},
		{name: "entering degraded cuts once", s: base, steps: []windowStep{
			{level: Degraded, value: 1.25, limit: 80, phase: PhaseDegraded},
			{advance: 5 * s, level: Degraded, value: 1.25, limit: 80, phase: PhaseDegraded}, // not worse
			{advance: 5 * s, level: Degraded, value: 1.22, limit: 80, phase: PhaseDegraded}, // better
		}},
		{name: "repeated cuts while the cause worsens, at most every CutEvery", s: base, steps: []windowStep{
			{level: Degraded, value: 1.25, limit: 80, phase: PhaseDegraded},
			{advance: s, level: Degraded, value: 1.30, limit: 80, phase: PhaseDegraded},
			{advance: s, level: Degraded, value: 1.30, limit: 64, phase: PhaseDegraded},
			{advance: 2 * s, level: Degraded, value: 1.30, limit: 64, phase: PhaseDegraded},
			{advance: 2 * s, level: Degraded, value: 1.35, limit: 51, phase: PhaseDegraded},
			{advance: 2 * s, level: Degraded, value: 1.40, limit: 40, phase: PhaseDegraded},
		}},
		{name: "a rise within Worsening is noise, not worse", s: WindowSettings{MaxInflight: 100, MinInflight: 10, Worsening: 0.05}, steps: []windowStep{
			{level: Degraded, value: 1.25, limit: 80, phase: PhaseDegraded},
			{advance: 3 * s, level: Degraded, value: 1.2501, limit: 80, phase: PhaseDegraded}, // creep
			{advance: 3 * s, level: Degraded, value: 1.3125, limit: 80, phase: PhaseDegraded}, // exactly 5 %: not more
			{advance: 3 * s, level: Degraded, value: 1.32, limit: 64, phase: PhaseDegraded},
			{advance: 3 * s, level: Degraded, value: 1.35, limit: 64, phase: PhaseDegraded}, // 1.32 × 1.05 = 1.386
			{advance: 3 * s, level: Degraded, value: 1.39, limit: 51, phase: PhaseDegraded},
		}},
		{name: "a new cause sets a new baseline", s: base, steps: []windowStep{
			{level: Degraded, value: 1.25, limit: 80, phase: PhaseDegraded},
			{advance: 3 * s, level: Degraded, signal: "kv_cache_usage", value: 0.96, limit: 80, phase: PhaseDegraded},
			{advance: 3 * s, level: Degraded, signal: "kv_cache_usage", value: 0.97, limit: 64, phase: PhaseDegraded},
		}},
		{name: "entering critical cuts once more, and only once", s: base, steps: []windowStep{
			{level: Degraded, value: 1.3, limit: 80, phase: PhaseDegraded},
			{advance: s, level: Critical, value: 1.6, limit: 64, phase: PhaseCritical},
			{advance: 5 * s, level: Critical, value: 1.9, limit: 64, phase: PhaseCritical},
			{advance: 5 * s, level: Degraded, value: 1.4, limit: 64, phase: PhaseDegraded},
		}},
		{name: "normal straight to critical cuts twice", s: base, steps: []windowStep{
			{level: Critical, value: 1.6, limit: 64, phase: PhaseCritical},
		}},
		{name: "cuts stop at the minimum", s: base, steps: []windowStep{
			{level: Critical, value: 1.6, limit: 64, phase: PhaseCritical},
			{advance: s, level: Degraded, value: 1.7, limit: 64, phase: PhaseDegraded},
			{advance: 2 * s, level: Degraded, value: 1.8, limit: 51, phase: PhaseDegraded},
			{advance: 2 * s, level: Degraded, value: 1.9, limit: 40, phase: PhaseDegraded},
			{advance: 2 * s, level: Degraded, value: 2.0, limit: 32, phase: PhaseDegraded},
			{advance: 2 * s, level: Degraded, value: 2.1, limit: 25, phase: PhaseDegraded},
			{advance: 2 * s, level: Degraded, value: 2.2, limit: 20, phase: PhaseDegraded},
			{advance: 2 * s, level: Degraded, value: 2.3, limit: 16, phase: PhaseDegraded},
			{advance: 2 * s, level: Degraded, value: 2.4, limit: 12, phase: PhaseDegraded},
			{advance: 2 * s, level: Degraded, value: 2.5, limit: 10, phase: PhaseDegraded},
			{advance: 2 * s, level: Degraded, value: 2.6, limit: 10, phase: PhaseDegraded},
		}},
		{name: "ramp up while recovering, then wait for the backlog", s: base, steps: []windowStep{
			{level: Critical, value: 1.6, limit: 64, phase: PhaseCritical},
			{advance: s, level: Normal, value: 1.0, busy: true, limit: 64, phase: PhaseRecovering},
			{advance: 500 * time.Millisecond, level: Normal, busy: true, limit: 64, phase: PhaseRecovering},
			{advance: 500 * time.Millisecond, level: Normal, busy: true, limit: 74, phase: PhaseRecovering},
			{advance: 2500 * time.Millisecond, level: Normal, busy: true, limit: 94, phase: PhaseRecovering},
			{advance: 500 * time.Millisecond, level: Normal, busy: true, limit: 100, phase: PhaseRecovering},
			{advance: 10 * s, level: Normal, busy: true, limit: 100, phase: PhaseRecovering},
			{level: Normal, limit: 100, phase: PhaseNormal},
		}},
		{name: "recovery ends at once when full and idle", s: base, steps: []windowStep{
			{level: Degraded, value: 1.3, limit: 80, phase: PhaseDegraded},
			{advance: s, level: Normal, limit: 80, phase: PhaseRecovering},
			{advance: 2 * s, level: Normal, limit: 100, phase: PhaseNormal},
		}},
		{name: "degraded again while recovering cuts from where it is", s: base, steps: []windowStep{
			{level: Degraded, value: 1.3, limit: 80, phase: PhaseDegraded},
			{advance: s, level: Normal, limit: 80, phase: PhaseRecovering},
			{advance: s, level: Normal, limit: 90, phase: PhaseRecovering},
			{advance: 100 * time.Millisecond, level: Degraded, value: 1.3, limit: 72, phase: PhaseDegraded},
		}},
		{name: "a pod that queues a cut's worth itself is cut again, a saturated signal or not", s: base, steps: []windowStep{
			{level: Degraded, signal: "kv_cache_usage", value: 1, limit: 80, phase: PhaseDegraded},
			{advance: 3 * s, level: Degraded, signal: "kv_cache_usage", value: 1, queued: 15, limit: 80, phase: PhaseDegraded}, // < 16 = 80 × 0.2
			{advance: s, level: Degraded, signal: "kv_cache_usage", value: 1, queued: 16, limit: 64, phase: PhaseDegraded},
			{advance: s, level: Degraded, signal: "kv_cache_usage", value: 1, queued: 16, limit: 64, phase: PhaseDegraded}, // CutEvery
			{advance: s, level: Degraded, signal: "kv_cache_usage", value: 1, queued: 13, limit: 51, phase: PhaseDegraded}, // ≥ 12.8
			{advance: 2 * s, level: Degraded, signal: "kv_cache_usage", value: 1, queued: 2, limit: 51, phase: PhaseDegraded},
			{advance: 2 * s, level: Normal, queued: 30, limit: 51, phase: PhaseRecovering}, // only while degraded
			{advance: s, level: Normal, queued: 30, limit: 61, phase: PhaseRecovering},
		}},
		{name: "a small window is cut again while the pod queues one", s: WindowSettings{MaxInflight: 4, MinInflight: 1}, steps: []windowStep{
			{level: Degraded, value: 1.3, limit: 3, phase: PhaseDegraded},
			{advance: 2 * s, level: Degraded, value: 1.3, queued: 1, limit: 2, phase: PhaseDegraded},
			{advance: 2 * s, level: Degraded, value: 1.3, queued: 0.5, limit: 2, phase: PhaseDegraded},
		}},
		{name: "a failure under load sets a ceiling that no ramp passes", s: base, steps: []windowStep{
			{fail: 90, level: Normal, limit: 72, phase: PhaseNormal, ceiling: 72},
			// the dead pod's readings go stale: degraded, cut from the ceiling
			{advance: s, level: Degraded, value: 1, limit: 57, phase: PhaseDegraded, ceiling: 72},
			{advance: s, level: Normal, busy: true, limit: 57, phase: PhaseRecovering, ceiling: 72},
			{advance: s, level: Normal, busy: true, limit: 67, phase: PhaseRecovering, ceiling: 72},
			{advance: s, level: Normal, busy: true, limit: 72, phase: PhaseRecovering, ceiling: 72},
			{advance: time.Hour, level: Normal, busy: true, limit: 72, phase: PhaseRecovering, ceiling: 72},
			{level: Normal, limit: 72, phase: PhaseNormal, ceiling: 72}, // full at the ceiling and idle
			{advance: 24 * time.Hour, level: Normal, limit: 72, phase: PhaseNormal, ceiling: 72},
		}},
		{name: "a failure at a small load is not the load's", s: base, steps: []windowStep{
			{fail: 49, level: Normal, limit: 100, phase: PhaseNormal},
			{level: Degraded, value: 1, limit: 80, phase: PhaseDegraded},
			// half of a cut window is under load: 40 × (1 − 0.2)
			{fail: 40, level: Degraded, value: 1, limit: 32, phase: PhaseDegraded, ceiling: 32},
		}},
		{name: "a later failure lowers the ceiling; FailureHold lifts it", s: WindowSettings{MaxInflight: 100, MinInflight: 10, FailureHold: 10 * s}, steps: []windowStep{
			{fail: 100, level: Normal, limit: 80, phase: PhaseNormal, ceiling: 80},
			{advance: 5 * s, fail: 90, level: Normal, limit: 72, phase: PhaseNormal, ceiling: 72},
			{advance: 5 * s, fail: 95, level: Normal, limit: 72, phase: PhaseNormal, ceiling: 72}, // higher: refreshes the hold only
			{advance: 9 * s, level: Normal, limit: 72, phase: PhaseNormal, ceiling: 72},
			{advance: s, level: Normal, busy: true, limit: 72, phase: PhaseRecovering},
			{advance: s, level: Normal, busy: true, limit: 82, phase: PhaseRecovering},
			{advance: 3 * s, level: Normal, limit: 100, phase: PhaseNormal},
		}},
		{name: "small windows ramp by at least one", s: WindowSettings{MaxInflight: 4, MinInflight: 1, Cut: 0.5, RampStep: 0.01}, steps: []windowStep{
			{level: Critical, value: 2, limit: 1, phase: PhaseCritical},
			{advance: s, level: Normal, limit: 1, phase: PhaseRecovering},
			{advance: s, level: Normal, limit: 2, phase: PhaseRecovering},
			{advance: 2 * s, level: Normal, limit: 4, phase: PhaseNormal},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w, err := NewWindow(tt.s)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i, st := range tt.steps {
				now = now.Add(st.advance)
				if st.fail > 0 {
					w.Fail(now, st.fail)
				}
				in := WindowInput{Level: st.level, Signal: st.signal, Value: st.value, BacklogEmpty: !st.busy, podQueued: st.queued}
				if in.Signal == "" {
					in.Signal = "fragmentation"
				}
				limit, phase := w.Tick(now, in)
				if limit != st.limit || phase != st.phase {
					t.Errorf("step %d: Tick(%+v) = %d, %v, want %d, %v", i, in, limit, phase, st.limit, st.phase)
				}
				if w.Limit() != limit || w.Phase() != phase {
					t.Errorf("step %d: Limit(), Phase() = %d, %v, want what Tick returned", i, w.Limit(), w.Phase())
				}
				if c, _ := w.Ceiling(); c != st.ceiling {
					t.Errorf("step %d: Ceiling() = %d, want %d", i, c, st.ceiling)
				}
			}
		})
	}
}

// TestWindowStaysInBounds drives random windows with random input and checks
// the invariants after every tick.
func TestWindowStaysInBounds(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		maxIn := 1 + rng.IntN(500)
		s := WindowSettings{
			MaxInflight: maxIn,
			MinInflight: rng.IntN(maxIn + 1),
			Cut:         rng.Float64() * 0.99,
			CutEvery:    time.Duration(rng.IntN(3000)) * time.Millisecond,
			RampStep:    rng.Float64(),
			RampEvery:   time.Duration(rng.IntN(3000)) * time.Millisecond,
			FailureHold: time.Duration(rng.IntN(2)) * time.Duration(rng.IntN(20000)) * time.Millisecond,
		}
		w, err := NewWindow(s)
		if err != nil {
			t.Fatalf("NewWindow(%+v) = %v", s, err)
		}
		minIn := max(s.MinInflight, 1)
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for i := range 500 {
			now = now.Add(time.Duration(rng.IntN(4000)) * time.Millisecond)
			if rng.IntN(50) == 0 {
				w.Fail(now, rng.IntN(maxIn+1))
			}
			in := WindowInput{Level: Level(rng.IntN(3)), Signal: "s", Value: rng.Float64() * 3, BacklogEmpty: rng.IntN(3) > 0}
			limit, phase := w.Tick(now, in)
			top := maxIn
			if c, _ := w.Ceiling(); c > 0 {
				top = c
			}
			if limit < minIn || limit > top || top > maxIn {
				t.Fatalf("settings %+v, tick %d: Tick(%+v) limit = %d, want within [%d, %d] and %d ≤ %d", s, i, in, limit, minIn, top, top, maxIn)
			}
			if phase == PhaseNormal && limit != top {
				t.Fatalf("settings %+v, tick %d: phase normal with limit %d, want %d", s, i, limit, top)
			}
			if want := map[Level]Phase{Degraded: PhaseDegraded, Critical: PhaseCritical}[in.Level]; in.Level != Normal && phase != want {
				t.Fatalf("tick %d: Tick(%+v) phase = %v, want %v", i, in, phase, want)
			}
		}
	}
}

func TestNewWindowRejectsInvalidSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		s     WindowSettings
		field string
	}{
		{"missing max", WindowSettings{}, "MaxInflight"},
		{"min above max", WindowSettings{MaxInflight: 4, MinInflight: 5}, "MinInflight"},
		{"negative min", WindowSettings{MaxInflight: 4, MinInflight: -1}, "MinInflight"},
		{"cut of one", WindowSettings{MaxInflight: 4, Cut: 1}, "Cut"},
		{"nan cut", WindowSettings{MaxInflight: 4, Cut: nan()}, "Cut"},
		{"negative cut every", WindowSettings{MaxInflight: 4, CutEvery: -1}, "CutEvery"},
		{"ramp above one", WindowSettings{MaxInflight: 4, RampStep: 1.5}, "RampStep"},
		{"negative ramp every", WindowSettings{MaxInflight: 4, RampEvery: -1}, "RampEvery"},
		{"worsening of one", WindowSettings{MaxInflight: 4, Worsening: 1}, "Worsening"},
		{"nan worsening", WindowSettings{MaxInflight: 4, Worsening: nan()}, "Worsening"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewWindow(tt.s); err == nil || !strings.Contains(err.Error(), "WindowSettings."+tt.field) {
				t.Fatalf("NewWindow(%+v) = %v, want an error naming %s", tt.s, err, tt.field)
			}
		})
	}
}
