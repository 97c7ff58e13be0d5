package breaker

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Level is an upstream's pressure level. Levels are ordered: a greater
// Level is worse.
type Level int

// Pressure levels.
const (
	Normal   Level = iota // every rule below its degrade threshold
	Degraded              // some rule ≥ its degrade threshold: cut the window
	Critical              // some rule ≥ its shed threshold: refuse new work
)

// String returns "normal", "degraded" or "critical".
func (l Level) String() string {
	switch l {
	case Normal:
		return "normal"
	case Degraded:
		return "degraded"
	case Critical:
		return "critical"
	default:
		return fmt.Sprintf("level(%d)", int(l))
	}
}

// StalePolicy says what a stale signal does to the level.
type StalePolicy int

// Stale policies. The zero value is StaleDegrade, the default.
const (
	// StaleDegrade treats a stale signal as at least degraded.
	StaleDegrade StalePolicy = iota
	// StaleHold keeps the level where it is while any signal is stale:
	// fresh signals may still raise it, nothing lowers it.
	StaleHold
	// StaleIgnore drops a stale signal as if it were absent.
	StaleIgnore
)

// String returns "degrade", "hold" or "ignore", as in the policy file.
func (p StalePolicy) String() string {
	switch p {
	case StaleDegrade:
		return "degrade"
	case StaleHold:
		return "hold"
	case StaleIgnore:
		return "ignore"
	default:
		return fmt.Sprintf("stale_policy(%d)", int(p))
	}
}

// parseStalePolicy maps the policy file's "degrade", "hold" or "ignore"
// (or "", the default) onto a StalePolicy.
func parseStalePolicy(s string) (StalePolicy, error) {
	switch s {
	case "", "degrade":
		return StaleDegrade, nil
	case "hold":
		return StaleHold, nil
	case "ignore":
		return StaleIgnore, nil
	}
	return StaleDegrade, fmt.Errorf("breaker: stale policy %q, want degrade, hold or ignore", s)
}

// Rule is the thresholds of one signal.
type Rule struct {
	// Signal names the signal, e.g. "fragmentation"; non-empty and unique
	// within LevelSettings.Rules.
	Signal string
	// Degrade is the value at or above which the signal is degraded. Any
	// finite value.
	Degrade float64
	// Shed is the value at or above which it is critical. 0 means the rule
	// never sheds (it only cuts the window); otherwise finite and > Degrade.
	Shed float64
	// Horizon, when above 0, makes it a trend rule: the rule judges the
	// value projected this far ahead along its rise since the previous
	// fresh reading (value + slope × Horizon), so a signal climbing fast
	// reaches its level before the value itself does. A falling or flat
	// signal is judged as it is: the projection only raises, never lowers.
	// 0 means the value as read; otherwise > 0.
	Horizon time.Duration
	// For, when above 0, is how long the rule's fresh value must reach a
	// level, on every reading, before it raises the level there (like a
	// Prometheus alert's for): a value that reaches a threshold on one
	// reading and not the next (an allocator read mid-step swings with each
	// step's shape) raises nothing. It delays only the way up; a stale
	// reading under StaleDegrade, and leaving a level, are not affected. 0
	// means the first reading raises it; otherwise > 0.
	For time.Duration
}

// LevelSettings configures a LevelMachine. The zero value has no rules and
// stays normal.
type LevelSettings struct {
	// Rules are the signals that count, in priority order: when several
	// reach the same level at once, the first names the cause.
	Rules []Rule
	// Hysteresis is the margin, as a fraction of each threshold, by which a
	// value must fall below the threshold to leave its level: the level is
	// left only below threshold × (1 − Hysteresis), so with 0.05 a degrade
	// threshold of 1.2 is left below 1.14 and a waiting threshold of 100
	// below 95. A fraction, unlike an absolute margin, means the same for
	// ratios, counts and rates alike. For a negative threshold the margin is
	// taken from its magnitude (threshold − |threshold| × Hysteresis), so it
	// still lies below the threshold; a threshold of 0 has no margin. 0 means
	// no margin; otherwise 0 ≤ Hysteresis < 1 (the policy file's default is
	// 0.05).
	Hysteresis float64
	// Hold is how long a value must stay below its exit value (see
	// Hysteresis), on every reading, before its level is left. 0 means the
	// first such reading leaves it; otherwise > 0.
	Hold time.Duration
	// OnStale is the policy for stale readings. The zero value is StaleDegrade.
	OnStale StalePolicy
}

func (s LevelSettings) validate() error {
	var errs []error
	bad := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("breaker: LevelSettings.%s = %v, want %s", field, v, want))
	}
	seen := make(map[string]bool, len(s.Rules))
	for i, r := range s.Rules {
		switch {
		case r.Signal == "":
			bad(fmt.Sprintf("Rules[%d].Signal", i), `""`, "a signal name")
		case seen[r.Signal]:
			bad(fmt.Sprintf("Rules[%d].Signal", i), r.Signal, "a signal not named before")
		}
		seen[r.Signal] = true
		if !finite(r.Degrade) {
			bad(fmt.Sprintf("Rules[%d].Degrade", i), r.Degrade, "a finite value")
		}
		if r.Shed != 0 && (!finite(r.Shed) || r.Shed <= r.Degrade) {
			bad(fmt.Sprintf("Rules[%d].Shed", i), r.Shed, fmt.Sprintf("0 or a finite value > Degrade (%v)", r.Degrade))
		}
		if r.Horizon < 0 {
			bad(fmt.Sprintf("Rules[%d].Horizon", i), r.Horizon, "≥ 0")
		}
		if r.For < 0 {
			bad(fmt.Sprintf("Rules[%d].For", i), r.For, "≥ 0")
		}
	}
	if !(s.Hysteresis >= 0 && s.Hysteresis < 1) { // also refuses NaN
		bad("Hysteresis", s.Hysteresis, "a fraction ≥ 0 and < 1")
	}
	if s.Hold < 0 {
		bad("Hold", s.Hold, "≥ 0")
	}
	if s.OnStale < StaleDegrade || s.OnStale > StaleIgnore {
		bad("OnStale", int(s.OnStale), "StaleDegrade, StaleHold or StaleIgnore")
	}
	return errors.Join(errs...)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// threshold returns the value at which r reaches level k (Degraded or
// Critical), and false when r never reaches it.
func (r Rule) threshold(k Level) (float64, bool) {
	if k == Critical {
		return r.Shed, r.Shed != 0
	}
	return r.Degrade, true
}

// exit is the value below which a reading leaves a level whose threshold
// is thr: thr × (1 − h) for thr ≥ 0, thr − |thr| × h in general.
func exit(thr, h float64) float64 { return thr - math.Abs(thr)*h }

// attained is the level value v reaches on r, without hysteresis.
func (r Rule) attained(v float64) Level {
	switch {
	case r.Shed != 0 && v >= r.Shed:
		return Critical
	case v >= r.Degrade:
		return Degraded
	}
	return Normal
}

// Reading is one signal's value for an upstream: the worst over its GPUs.
type Reading struct {
	// Signal names the signal, as in Rule.Signal.
	Signal string
	// Value is the latest value. NaN counts as stale.
	Value float64
	// Stale says the source has had no good reading for stale_after; Value
	// is then the last one known.
	Stale bool
	// Source names where the value came from (a pressure source), so a
	// level change can say which source went stale. Optional.
	Source string
}

// Transition is one change of level, reported once by the call that made it.
type Transition struct {
	// From and To are the levels before and after.
	From, To Level
	// Signal is the cause: on the way up the rule that raised the level, on
	// the way down the rule that had raised it.
	Signal string
	// Value is Signal's value in the reading that made the change; always
	// finite (a NaN reading reports 0).
	Value float64
	// Stale says the cause's reading was stale: under StaleDegrade it is
	// why the level rose or stayed, under StaleIgnore why it fell.
	Stale bool
	// Source is the cause's Reading.Source (empty if it named none).
	Source string
}
