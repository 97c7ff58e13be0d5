package breaker

import (
	"math"
	"time"
)

// LevelMachine turns one upstream's readings into a level. A worse level
// takes effect on the reading that shows it (for a rule with For, on the
// reading that has shown it for For); a level is left only once every
// rule has stayed below its threshold × (1 − Hysteresis), on every reading,
// for Hold. It is a pure core: every method takes now, nothing reads a clock,
// and it is not safe for concurrent use (Slow adds the lock). Create one with
// NewLevelMachine.
type LevelMachine struct {
	s     LevelSettings
	level Level
	// clearSince[k] is when every rule first went below the exit value of
	// its level-k threshold in the current unbroken run; valid if clear[k].
	clearSince  [Critical + 1]time.Time
	clear       [Critical + 1]bool
	cause       int // index into s.Rules of the current cause, or -1
	causeValue  float64
	causeStale  bool
	causeSource string
	// last[i] is rule i's previous fresh reading, for trend rules (Horizon).
	last []lastReading
	// held[i] is how long rule i's fresh value has reached each level, for
	// rules with For.
	held []heldLevels
}

// heldLevels is, per level, whether a rule's fresh readings have reached it
// on every reading of an unbroken run, and since when.
type heldLevels struct {
	on    [Critical + 1]bool
	since [Critical + 1]time.Time
}

// lastReading is one rule's previous fresh value and when it was read.
type lastReading struct {
	ok    bool
	value float64
	at    time.Time
}

// NewLevelMachine returns a LevelMachine at Normal, or an error naming each
// invalid field of s.
func NewLevelMachine(s LevelSettings) (*LevelMachine, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	s.Rules = append([]Rule(nil), s.Rules...)
	return &LevelMachine{s: s, cause: -1, last: make([]lastReading, len(s.Rules)), held: make([]heldLevels, len(s.Rules))}, nil
}

// Level returns the current level.
func (m *LevelMachine) Level() Level { return m.level }

// Cause returns the signal that drove the current level (empty at Normal
// before any rule fired) and its latest value.
func (m *LevelMachine) Cause() (signal string, value float64) {
	if m.cause < 0 {
		return "", 0
	}
	return m.s.Rules[m.cause].Signal, m.causeValue
}

// ruleReading is the reading picked for one rule.
type ruleReading struct {
	found  bool
	value  float64
	stale  bool
	source string
}

// evaluation is what one set of readings says, before time is considered.
type evaluation struct {
	attained    Level // worst level any rule reaches now
	attainedIdx int   // first rule reaching attained, or -1
	bandIdx     int   // first rule with the highest level within the hysteresis band, or -1
	clear       [Critical + 1]bool
	frozen      bool // a stale signal under StaleHold
	values      []ruleReading
}

// Observe takes one round of readings at now and returns the transition it
// caused, if any. Readings for signals without a rule are ignored; rules
// without a reading count as absent (they neither raise nor hold a level).
// When a signal has several readings, the worst fresh one counts.
func (m *LevelMachine) Observe(now time.Time, readings []Reading) (Transition, bool) {
	e := m.evaluate(now, readings)
	for k := Degraded; k <= Critical; k++ {
		switch {
		case !e.clear[k] || e.frozen:
			m.clear[k] = false
		case !m.clear[k]:
			m.clear[k], m.clearSince[k] = true, now
		}
	}
	from, to := m.level, m.level
	if e.attained > from {
		to = e.attained
		m.cause = e.attainedIdx
	} else {
		for to > Normal && m.clear[to] && now.Sub(m.clearSince[to]) >= m.s.Hold {
			to--
		}
	}
	if m.cause >= 0 && e.values[m.cause].found {
		m.setCause(m.cause, e.values[m.cause])
	}
	if to == from {
		return Transition{}, false
	}
	t := Transition{From: from, To: to, Value: m.causeValue, Stale: m.causeStale, Source: m.causeSource}
	if m.cause >= 0 {
		t.Signal = m.s.Rules[m.cause].Signal
	}
	m.level = to
	if to < from && e.bandIdx >= 0 { // on the way down the rule still nearest its threshold leads
		m.setCause(e.bandIdx, e.values[e.bandIdx])
	}
	return t, true
}

// setCause records rule i's reading as the cause, with a finite value: a
// stale reading without a last value (NaN) reports 0, never NaN, so logs,
// metrics and JSON can carry it.
func (m *LevelMachine) setCause(i int, rr ruleReading) {
	m.cause, m.causeValue, m.causeStale, m.causeSource = i, rr.value, rr.stale, rr.source
	if !finite(m.causeValue) {
		m.causeValue = 0
	}
}

// evaluate applies the stale policy and thresholds to one round of readings.
func (m *LevelMachine) evaluate(now time.Time, readings []Reading) evaluation {
	e := evaluation{attainedIdx: -1, bandIdx: -1, values: m.pick(readings)}
	m.project(now, e.values)
	e.clear[Degraded], e.clear[Critical] = true, true
	band := Normal
	for i, r := range m.s.Rules {
		rr := e.values[i]
		if !rr.found || rr.stale {
			m.held[i] = heldLevels{} // a run of readings at a level is unbroken fresh ones
		}
		if !rr.found {
			continue
		}
		var att, hb Level // attained now; highest level within the hysteresis band
		switch {
		case !rr.stale:
			att, hb = m.sustained(i, now, r.attained(rr.value)), m.band(r, rr.value)
		case m.s.OnStale == StaleDegrade:
			att, hb = Degraded, Degraded
		case m.s.OnStale == StaleHold:
			e.frozen = true
			continue
		default: // StaleIgnore
			continue
		}
		// A fresh reading that reaches the level names the cause before a
		// stale one that reaches it only by on_stale: the value that truly
		// crossed its threshold is the better explanation.
		if att > e.attained || att > Normal && att == e.attained && e.values[e.attainedIdx].stale && !rr.stale {
			e.attained, e.attainedIdx = att, i
		}
		if hb > band {
			band, e.bandIdx = hb, i
		}
		for k := Degraded; k <= hb; k++ {
			e.clear[k] = false
		}
	}
	return e
}

// sustained tracks how long rule i's fresh value has reached each level up
// to att and returns the highest it has held for the rule's For (att itself
// when For is 0). A reading that falls short of a level restarts its run.
func (m *LevelMachine) sustained(i int, now time.Time, att Level) Level {
	h := &m.held[i]
	for k := Degraded; k <= Critical; k++ {
		switch {
		case k > att:
			h.on[k] = false
		case !h.on[k]:
			h.on[k], h.since[k] = true, now
		}
	}
	f := m.s.Rules[i].For
	for f > 0 && att > Normal && now.Sub(h.since[att]) < f {
		att--
	}
	return att
}

// project replaces each trend rule's fresh value by its projection Horizon
// ahead along the rise since the rule's previous fresh reading, when that
// is higher, and remembers the value as read for the next round. A missing
// or stale reading forgets the previous one: a slope is taken only between
// two fresh readings in a row.
func (m *LevelMachine) project(now time.Time, values []ruleReading) {
	for i, r := range m.s.Rules {
		rr := &values[i]
		prev := m.last[i]
		if !rr.found || rr.stale {
			m.last[i] = lastReading{}
			continue
		}
		m.last[i] = lastReading{ok: true, value: rr.value, at: now}
		if r.Horizon <= 0 || !prev.ok || !now.After(prev.at) || rr.value <= prev.value {
			continue
		}
		slope := (rr.value - prev.value) / now.Sub(prev.at).Seconds()
		if p := rr.value + slope*r.Horizon.Seconds(); finite(p) {
			rr.value = p
		}
	}
}

// band is the highest level k whose exit value (threshold × (1 − Hysteresis))
// v still reaches.
func (m *LevelMachine) band(r Rule, v float64) Level {
	for k := Critical; k > Normal; k-- {
		if thr, ok := r.threshold(k); ok && v >= exit(thr, m.s.Hysteresis) {
			return k
		}
	}
	return Normal
}

// pick finds each rule's reading: the worst fresh one, else a stale one.
func (m *LevelMachine) pick(readings []Reading) []ruleReading {
	out := make([]ruleReading, len(m.s.Rules))
	for _, rd := range readings {
		for i, r := range m.s.Rules {
			if r.Signal != rd.Signal {
				continue
			}
			stale := rd.Stale || math.IsNaN(rd.Value)
			cur := &out[i]
			if !cur.found || cur.stale && !stale || cur.stale == stale && rd.Value > cur.value {
				*cur = ruleReading{found: true, value: rd.Value, stale: stale, source: rd.Source}
			}
		}
	}
	return out
}

// update applies new settings, keeping the level. Hold and clear timers run
// on; the cause is kept if its signal still has a rule.
func (m *LevelMachine) update(s LevelSettings) {
	signal, _ := m.Cause()
	m.s = s
	m.s.Rules = append([]Rule(nil), s.Rules...)
	m.last = make([]lastReading, len(s.Rules)) // a slope starts afresh
	m.held = make([]heldLevels, len(s.Rules))  // and so does a run
	m.cause = -1
	for i, r := range m.s.Rules {
		if r.Signal == signal {
			m.cause = i
		}
	}
}
