package breaker

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func rd(signal string, v float64) Reading      { return Reading{Signal: signal, Value: v} }
func staleRd(signal string, v float64) Reading { return Reading{Signal: signal, Value: v, Stale: true} }

// levelStep advances the clock by advance, observes readings, and states the
// level after it and the transition it caused ("" for none).
type levelStep struct {
	advance    time.Duration
	readings   []Reading
	level      Level
	transition string
}

func transitionString(t Transition) string {
	s := fmt.Sprintf("%v→%v %s=%g", t.From, t.To, t.Signal, t.Value)
	if t.Stale {
		s += " stale"
	}
	if t.Source != "" {
		s += " from " + t.Source
	}
	return s
}

func testRules() []Rule {
	return []Rule{
		{Signal: "fragmentation", Degrade: 1.2, Shed: 1.5},
		{Signal: "kv_cache_usage", Degrade: 0.95},
		{Signal: "memory_used", Degrade: 0.95, Shed: 0.98},
	}
}

// flap returns n steps every 500ms alternating between a and b on
// fragmentation, all expected at level want with no transition.
func flap(n int, a, b float64, want Level) []levelStep {
	steps := make([]levelStep, n)
	for i := range steps {
		v := a
		if i%2 == 1 {
			v = b
		}
		steps[i] = levelStep{advance: 500 * time.Millisecond, readings: []Reading{rd("fragmentation", v)}, level: want}
	}
	return steps
}

func frag(v float64) []Reading { return []Reading{rd("fragmentation", v)} }

func TestLevelMachineSteps(t *testing.T) {
	t.Parallel()
	const s = time.Second
	tests := []struct {
		name    string
		onStale StalePolicy
		hold    time.Duration // 0 means 5s here; use -1 for a zero Hold
		rules   []Rule        // nil means testRules()
		steps   []levelStep
	}{
		{name: "enter degraded at once", steps: []levelStep{
			{readings: frag(1.1), level: Normal},
			{advance: s, readings: frag(1.2), level: Degraded, transition: "normal→degraded fragmentation=1.2"},
		}},
		{name: "enter critical at once", steps: []levelStep{
			{readings: frag(1.5), level: Critical, transition: "normal→critical fragmentation=1.5"},
		}},
		{name: "degraded then critical", steps: []levelStep{
			{readings: frag(1.3), level: Degraded, transition: "normal→degraded fragmentation=1.3"},
			{advance: s, readings: frag(1.6), level: Critical, transition: "degraded→critical fragmentation=1.6"},
		}},
		{name: "leave only after hold", steps: []levelStep{
			{readings: frag(1.25), level: Degraded, transition: "normal→degraded fragmentation=1.25"},
			{advance: s, readings: frag(1.1), level: Degraded},
			{advance: 4500 * time.Millisecond, readings: frag(1.1), level: Degraded},
			{advance: 500 * time.Millisecond, readings: frag(1.1), level: Normal, transition: "degraded→normal fragmentation=1.1"},
		}},
		// Hysteresis 0.05 is a fraction: degraded (1.2) is left below
		// 1.2 × 0.95 = 1.14, critical (1.5) below 1.425.
		{name: "zero hold leaves on the first reading below the margin", hold: -1, steps: []levelStep{
			{readings: frag(1.25), level: Degraded, transition: "normal→degraded fragmentation=1.25"},
			{advance: s, readings: frag(1.16), level: Degraded},
			{advance: s, readings: frag(1.145), level: Degraded}, // below 1.2 − 0.05, but not below 1.2 × 0.95
			{advance: s, readings: frag(1.135), level: Normal, transition: "degraded→normal fragmentation=1.135"},
		}},
		{name: "hysteresis band holds the level", steps: []levelStep{
			{readings: frag(1.25), level: Degraded, transition: "normal→degraded fragmentation=1.25"},
			{advance: s, readings: frag(1.17), level: Degraded},
			{advance: 10 * s, readings: frag(1.16), level: Degraded},
			{advance: s, readings: frag(1.145), level: Degraded},
			{advance: 10 * s, readings: frag(1.145), level: Degraded},
			{advance: s, readings: frag(1.13), level: Degraded},
			{advance: 5 * s, readings: frag(1.13), level: Normal, transition: "degraded→normal fragmentation=1.13"},
		}},
		{name: "critical holds within its band of 1.425", steps: []levelStep{
			{readings: frag(1.5), level: Critical, transition: "normal→critical fragmentation=1.5"},
			{advance: s, readings: frag(1.44), level: Critical},
			{advance: 10 * s, readings: frag(1.43), level: Critical},
			{advance: s, readings: frag(1.42), level: Critical},
			{advance: 5 * s, readings: frag(1.42), level: Degraded, transition: "critical→degraded fragmentation=1.42"},
		}},
		{name: "the margin scales with a count threshold", rules: []Rule{{Signal: "waiting", Degrade: 100, Shed: 200}}, steps: []levelStep{
			{readings: []Reading{rd("waiting", 120)}, level: Degraded, transition: "normal→degraded waiting=120"},
			{advance: s, readings: []Reading{rd("waiting", 99)}, level: Degraded},
			{advance: 10 * s, readings: []Reading{rd("waiting", 96)}, level: Degraded}, // within 5 % of 100
			{advance: s, readings: []Reading{rd("waiting", 94)}, level: Degraded},
			{advance: 5 * s, readings: []Reading{rd("waiting", 94)}, level: Normal, transition: "degraded→normal waiting=94"},
			{advance: s, readings: []Reading{rd("waiting", 250)}, level: Critical, transition: "normal→critical waiting=250"},
			{advance: s, readings: []Reading{rd("waiting", 191)}, level: Critical}, // within 5 % of 200
			{advance: 10 * s, readings: []Reading{rd("waiting", 191)}, level: Critical},
			{advance: s, readings: []Reading{rd("waiting", 189)}, level: Critical},
			{advance: 5 * s, readings: []Reading{rd("waiting", 189)}, level: Degraded, transition: "critical→degraded waiting=189"},
		}},
		{name: "a negative threshold's margin lies below it", rules: []Rule{{Signal: "headroom", Degrade: -10}}, steps: []levelStep{
			{readings: []Reading{rd("headroom", -5)}, level: Degraded, transition: "normal→degraded headroom=-5"},
			{advance: s, readings: []Reading{rd("headroom", -10.4)}, level: Degraded}, // exit value is −10.5
			{advance: 10 * s, readings: []Reading{rd("headroom", -10.4)}, level: Degraded},
			{advance: s, readings: []Reading{rd("headroom", -10.6)}, level: Degraded},
			{advance: 5 * s, readings: []Reading{rd("headroom", -10.6)}, level: Normal, transition: "degraded→normal headroom=-10.6"},
		}},
		{name: "a zero threshold has no margin", hold: -1, rules: []Rule{{Signal: "errors", Degrade: 0, Shed: 10}}, steps: []levelStep{
			{readings: []Reading{rd("errors", 0)}, level: Degraded, transition: "normal→degraded errors=0"},
			{advance: s, readings: []Reading{rd("errors", -0.001)}, level: Normal, transition: "degraded→normal errors=-0.001"},
		}},
		{name: "a reading in the band restarts the hold", steps: []levelStep{
			{readings: frag(1.25), level: Degraded, transition: "normal→degraded fragmentation=1.25"},
			{advance: s, readings: frag(1.0), level: Degraded},
			{advance: 4 * s, readings: frag(1.16), level: Degraded},
			{advance: s, readings: frag(1.0), level: Degraded},
			{advance: 4500 * time.Millisecond, readings: frag(1.0), level: Degraded},
			{advance: 500 * time.Millisecond, readings: frag(1.0), level: Normal, transition: "degraded→normal fragmentation=1"},
		}},
		{name: "critical steps down to degraded, then normal", steps: []levelStep{
			{readings: frag(1.6), level: Critical, transition: "normal→critical fragmentation=1.6"},
			{advance: s, readings: frag(1.3), level: Critical},
			{advance: 5 * s, readings: frag(1.3), level: Degraded, transition: "critical→degraded fragmentation=1.3"},
			{advance: s, readings: frag(1.1), level: Degraded},
			{advance: 5 * s, readings: frag(1.1), level: Normal, transition: "degraded→normal fragmentation=1.1"},
		}},
		{name: "critical straight to normal when clear of both", steps: []levelStep{
			{readings: frag(1.6), level: Critical, transition: "normal→critical fragmentation=1.6"},
			{advance: s, readings: frag(1.0), level: Critical},
			{advance: 5 * s, readings: frag(1.0), level: Normal, transition: "critical→normal fragmentation=1"},
		}},
		{name: "a rule without shed only degrades", steps: []levelStep{
			{readings: []Reading{rd("kv_cache_usage", 1.0)}, level: Degraded, transition: "normal→degraded kv_cache_usage=1"},
		}},
		{name: "the worst rule wins and names the cause", steps: []levelStep{
			{readings: []Reading{rd("kv_cache_usage", 0.99), rd("memory_used", 0.99)}, level: Critical, transition: "normal→critical memory_used=0.99"},
			{advance: s, readings: []Reading{rd("kv_cache_usage", 0.99), rd("memory_used", 0.5)}, level: Critical},
			{advance: 5 * s, readings: []Reading{rd("kv_cache_usage", 0.99), rd("memory_used", 0.5)}, level: Degraded, transition: "critical→degraded memory_used=0.5"},
			{advance: 5 * s, readings: []Reading{rd("kv_cache_usage", 0.5)}, level: Degraded},
			{advance: 5 * s, readings: []Reading{rd("kv_cache_usage", 0.5)}, level: Normal, transition: "degraded→normal kv_cache_usage=0.5"},
		}},
		{name: "absent and unknown signals count for nothing", steps: []levelStep{
			{readings: []Reading{rd("waiting", 1e9)}, level: Normal},
			{readings: nil, level: Normal},
		}},
		{name: "the worst fresh reading of a signal counts", steps: []levelStep{
			{readings: []Reading{rd("fragmentation", 1.0), staleRd("fragmentation", 2), rd("fragmentation", 1.3)}, level: Degraded, transition: "normal→degraded fragmentation=1.3"},
		}},
		{name: "flapping across the threshold does not flap", steps: append([]levelStep{
			{readings: frag(1.21), level: Degraded, transition: "normal→degraded fragmentation=1.21"},
		}, flap(40, 1.19, 1.21, Degraded)...)},
		{name: "flapping far below does not flap either", steps: append([]levelStep{
			{readings: frag(1.3), level: Degraded, transition: "normal→degraded fragmentation=1.3"},
		}, flap(40, 1.0, 1.3, Degraded)...)},
		{name: "flapping into shed holds critical", steps: append([]levelStep{
			{readings: frag(1.5), level: Critical, transition: "normal→critical fragmentation=1.5"},
		}, flap(40, 1.0, 1.5, Critical)...)},
		{name: "a stale reading names its source", onStale: StaleDegrade, steps: []levelStep{
			{readings: []Reading{{Signal: "kv_cache_usage", Value: 0.5, Stale: true, Source: "vllm-0/vllm"}}, level: Degraded,
				transition: "normal→degraded kv_cache_usage=0.5 stale from vllm-0/vllm"},
		}},
		{name: "stale degrade raises to degraded and holds it", onStale: StaleDegrade, steps: []levelStep{
			{readings: frag(1.0), level: Normal},
			{advance: s, readings: []Reading{staleRd("fragmentation", 1.0)}, level: Degraded, transition: "normal→degraded fragmentation=1 stale"},
			{advance: 10 * s, readings: []Reading{staleRd("fragmentation", 1.0)}, level: Degraded},
			{advance: s, readings: frag(1.0), level: Degraded},
			{advance: 5 * s, readings: frag(1.0), level: Normal, transition: "degraded→normal fragmentation=1"},
		}},
		{name: "stale degrade lets critical fall to degraded", onStale: StaleDegrade, steps: []levelStep{
			{readings: frag(1.6), level: Critical, transition: "normal→critical fragmentation=1.6"},
			{advance: s, readings: []Reading{staleRd("fragmentation", 1.6)}, level: Critical},
			{advance: 5 * s, readings: []Reading{staleRd("fragmentation", 1.6)}, level: Degraded, transition: "critical→degraded fragmentation=1.6 stale"},
		}},
		{name: "NaN counts as stale", onStale: StaleDegrade, steps: []levelStep{
			{readings: frag(nan()), level: Degraded, transition: "normal→degraded fragmentation=0 stale"},
		}},
		{name: "a fresh crossing names the cause before a stale signal listed first", onStale: StaleDegrade, steps: []levelStep{
			{readings: []Reading{staleRd("fragmentation", 1.0), rd("kv_cache_usage", 0.97)}, level: Degraded, transition: "normal→degraded kv_cache_usage=0.97"},
		}},
		{name: "stale hold keeps the level; fresh signals may still raise it", onStale: StaleHold, steps: []levelStep{
			{readings: frag(1.3), level: Degraded, transition: "normal→degraded fragmentation=1.3"},
			{advance: s, readings: []Reading{staleRd("fragmentation", 1.0)}, level: Degraded},
			{advance: 10 * s, readings: []Reading{staleRd("fragmentation", 1.0)}, level: Degraded},
			{advance: s, readings: []Reading{staleRd("fragmentation", 1.0), rd("memory_used", 0.99)}, level: Critical, transition: "degraded→critical memory_used=0.99"},
			{advance: s, readings: []Reading{staleRd("fragmentation", 1.0), rd("memory_used", 0.1)}, level: Critical},
			{advance: 10 * s, readings: []Reading{staleRd("fragmentation", 1.0), rd("memory_used", 0.1)}, level: Critical},
			{advance: s, readings: []Reading{rd("fragmentation", 1.0), rd("memory_used", 0.1)}, level: Critical},
			{advance: 5 * s, readings: []Reading{rd("fragmentation", 1.0), rd("memory_used", 0.1)}, level: Normal, transition: "critical→normal memory_used=0.1"},
		}},
		{name: "stale hold at normal stays normal", onStale: StaleHold, steps: []levelStep{
			{readings: []Reading{staleRd("fragmentation", 9)}, level: Normal},
		}},
		{name: "stale ignore drops the signal", onStale: StaleIgnore, steps: []levelStep{
			{readings: []Reading{staleRd("fragmentation", 9)}, level: Normal},
			{advance: s, readings: frag(1.3), level: Degraded, transition: "normal→degraded fragmentation=1.3"},
			{advance: s, readings: []Reading{staleRd("fragmentation", 1.3)}, level: Degraded},
			{advance: 5 * s, readings: []Reading{staleRd("fragmentation", 1.3)}, level: Normal, transition: "degraded→normal fragmentation=1.3 stale"},
		}},
		// A trend rule judges value + slope × horizon: 1 → 1.0625 in 0.5 s
		// projects 1.3125 two seconds ahead, degraded while the value itself
		// is far under 1.2.
		{name: "trend rule acts on the projection", rules: []Rule{{Signal: "fragmentation", Degrade: 1.2, Shed: 1.5, Horizon: 2 * s}}, steps: []levelStep{
			{readings: frag(1), level: Normal},
			{advance: s / 2, readings: frag(1.0625), level: Degraded, transition: "normal→degraded fragmentation=1.3125"},
			// flat: judged as read, and left after hold as any level
			{advance: s / 2, readings: frag(1.0625), level: Degraded},
			{advance: 5 * s, readings: frag(1.0625), level: Normal, transition: "degraded→normal fragmentation=1.0625"},
		}},
		{name: "trend rule: a slow rise stays under", rules: []Rule{{Signal: "fragmentation", Degrade: 1.2, Horizon: 2 * s}}, steps: []levelStep{
			{readings: frag(1.1), level: Normal},
			{advance: s / 2, readings: frag(1.11), level: Normal},  // projects 1.15
			{advance: s / 2, readings: frag(1.125), level: Normal}, // projects 1.185
		}},
		{name: "trend rule: a stale or missing reading breaks the slope", rules: []Rule{{Signal: "fragmentation", Degrade: 1.2, Horizon: 2 * s}}, onStale: StaleIgnore, steps: []levelStep{
			{readings: frag(1.0), level: Normal},
			{advance: s / 2, readings: []Reading{staleRd("fragmentation", 1.05)}, level: Normal},
			{advance: s / 2, readings: frag(1.15), level: Normal}, // no fresh predecessor: judged as read
			{advance: s / 2, readings: nil, level: Normal},
			{advance: s / 2, readings: frag(1.19), level: Normal},
		}},
		{name: "without a horizon a rise is judged as read", rules: []Rule{{Signal: "fragmentation", Degrade: 1.2}}, steps: []levelStep{
			{readings: frag(1.0), level: Normal},
			{advance: s / 2, readings: frag(1.19), level: Normal},
		}},
		// A rule with For raises a level only after its fresh value has
		// reached it on every reading for For.
		{name: "for: a value held for For raises the level", rules: []Rule{{Signal: "fragmentation", Degrade: 1.2, Shed: 1.5, For: s}}, steps: []levelStep{
			{readings: frag(1.3), level: Normal},
			{advance: s / 2, readings: frag(1.3), level: Normal},
			{advance: s / 2, readings: frag(1.6), level: Degraded, transition: "normal→degraded fragmentation=1.6"}, // ≥ 1.2 for 1 s; ≥ 1.5 just now
			{advance: s / 2, readings: frag(1.6), level: Degraded},
			{advance: s / 2, readings: frag(1.55), level: Critical, transition: "degraded→critical fragmentation=1.55"},
		}},
		{name: "for: readings that swing step by step raise nothing", rules: []Rule{{Signal: "fragmentation", Degrade: 1.2, Shed: 1.5, For: s}},
			steps: flap(12, 1.6, 1.13, Normal)},
		{name: "for: a missing or stale reading restarts the run", rules: []Rule{{Signal: "fragmentation", Degrade: 1.2, For: s}}, onStale: StaleIgnore, steps: []levelStep{
			{readings: frag(1.3), level: Normal},
			{advance: s / 2, readings: nil, level: Normal},
			{advance: s / 2, readings: frag(1.3), level: Normal}, // the run starts again here
			{advance: s / 2, readings: []Reading{staleRd("fragmentation", 1.3)}, level: Normal},
			{advance: s / 2, readings: frag(1.3), level: Normal},
			{advance: s / 2, readings: frag(1.3), level: Normal},
			{advance: s / 2, readings: frag(1.3), level: Degraded, transition: "normal→degraded fragmentation=1.3"},
		}},
		{name: "for: a stale reading still degrades at once", rules: []Rule{{Signal: "fragmentation", Degrade: 1.2, For: 10 * s}}, steps: []levelStep{
			{readings: []Reading{staleRd("fragmentation", 1.0)}, level: Degraded, transition: "normal→degraded fragmentation=1 stale"},
		}},
		{name: "for: leaving a level is not delayed by it", rules: []Rule{{Signal: "fragmentation", Degrade: 1.2, For: s}}, hold: -1, steps: []levelStep{
			{readings: frag(1.3), level: Normal},
			{advance: s, readings: frag(1.3), level: Degraded, transition: "normal→degraded fragmentation=1.3"},
			{advance: s / 2, readings: frag(1.3), level: Degraded}, // held within the band, not re-judged by For
			{advance: s / 2, readings: frag(1.1), level: Normal, transition: "degraded→normal fragmentation=1.1"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			hold := 5 * time.Second
			if tt.hold < 0 {
				hold = 0
			} else if tt.hold > 0 {
				hold = tt.hold
			}
			rules := tt.rules
			if rules == nil {
				rules = testRules()
			}
			m, err := NewLevelMachine(LevelSettings{Rules: rules, Hysteresis: 0.05, Hold: hold, OnStale: tt.onStale})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i, st := range tt.steps {
				now = now.Add(st.advance)
				tr, changed := m.Observe(now, st.readings)
				got := ""
				if changed {
					got = transitionString(tr)
				}
				if got != st.transition {
					t.Errorf("step %d: Observe(%v) transition = %q, want %q", i, st.readings, got, st.transition)
				}
				if m.Level() != st.level {
					t.Errorf("step %d: Level() = %v, want %v", i, m.Level(), st.level)
				}
			}
		})
	}
}

func TestNewLevelMachineRejectsInvalidSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		s     LevelSettings
		field string
	}{
		{"empty signal", LevelSettings{Rules: []Rule{{Degrade: 1}}}, "Rules[0].Signal"},
		{"duplicate signal", LevelSettings{Rules: []Rule{{Signal: "a", Degrade: 1}, {Signal: "a", Degrade: 2}}}, "Rules[1].Signal"},
		{"nan degrade", LevelSettings{Rules: []Rule{{Signal: "a", Degrade: nan()}}}, "Rules[0].Degrade"},
		{"shed below degrade", LevelSettings{Rules: []Rule{{Signal: "a", Degrade: 1.2, Shed: 1.1}}}, "Rules[0].Shed"},
		{"infinite shed", LevelSettings{Rules: []Rule{{Signal: "a", Degrade: 1.2, Shed: inf()}}}, "Rules[0].Shed"},
		{"negative hysteresis", LevelSettings{Hysteresis: -0.1}, "Hysteresis"},
		{"hysteresis of 1", LevelSettings{Hysteresis: 1}, "Hysteresis"},
		{"absolute-looking hysteresis", LevelSettings{Hysteresis: 5}, "Hysteresis"},
		{"nan hysteresis", LevelSettings{Hysteresis: nan()}, "Hysteresis"},
		{"infinite hysteresis", LevelSettings{Hysteresis: inf()}, "Hysteresis"},
		{"negative hold", LevelSettings{Hold: -time.Second}, "Hold"},
		{"negative horizon", LevelSettings{Rules: []Rule{{Signal: "a", Degrade: 1, Horizon: -time.Second}}}, "Rules[0].Horizon"},
		{"negative for", LevelSettings{Rules: []Rule{{Signal: "a", Degrade: 1, For: -time.Second}}}, "Rules[0].For"},
		{"unknown stale policy", LevelSettings{OnStale: 7}, "OnStale"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewLevelMachine(tt.s); err == nil || !strings.Contains(err.Error(), "LevelSettings."+tt.field) {
				t.Fatalf("NewLevelMachine(%+v) = %v, want an error naming %s", tt.s, err, tt.field)
			}
		})
	}
}

func TestLevelStrings(t *testing.T) {
	t.Parallel()
	got := fmt.Sprint(Normal, Degraded, Critical, Level(5), StaleDegrade, StaleHold, StaleIgnore, StalePolicy(4),
		PhaseNormal, PhaseDegraded, PhaseCritical, PhaseRecovering, Phase(9), scopeGlobal, scopeClient, Scope(3))
	want := "normal degraded critical level(5) degrade hold ignore stale_policy(4) " +
		"normal degraded critical recovering phase(9) global client scope(3)"
	if got != want {
		t.Fatalf("String() values = %q, want %q", got, want)
	}
}

func TestParseStalePolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    StalePolicy
		wantErr bool
	}{
		{"", StaleDegrade, false},
		{"degrade", StaleDegrade, false},
		{"hold", StaleHold, false},
		{"ignore", StaleIgnore, false},
		{"Hold", StaleDegrade, true},
		{"drop", StaleDegrade, true},
	}
	for _, tt := range tests {
		got, err := parseStalePolicy(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseStalePolicy(%q) = %v, %v, want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err == nil && tt.in != "" && got.String() != tt.in {
			t.Errorf("ParseStalePolicy(%q).String() = %q, want a round trip", tt.in, got.String())
		}
	}
}
