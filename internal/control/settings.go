package control

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// Settings configures a Controller.
type Settings struct {
	// Upstreams are the upstreams to decide for, in policy order; names are
	// unique and not empty.
	Upstreams []Upstream
	// Now is the clock of Observe. Nil means time.Now.
	Now func() time.Time
	// DeadlineOrder orders every queue EarliestDeadline in every phase (the
	// policy's queue.order: earliest_deadline); false: FIFO while a pod's
	// window is normal, ShortestFirst while it is not.
	DeadlineOrder bool
}

// Upstream is one upstream's slow breaker settings.
type Upstream struct {
	Name string
	// Slow holds the rules, hysteresis, hold, stale policy and window.
	Slow breaker.SlowSettings
	// Memory is memory admission; the zero value is off.
	Memory Memory
	// MaxInflightTokens is the token-budget window at its full size: the
	// estimated tokens (prompt + max output) in flight, cut and ramped with
	// the request window (TokenLimit = MaxInflightTokens × Limit ÷
	// MaxInflight). 0: off.
	MaxInflightTokens int64
}

// validate returns every problem of s, each naming its field.
func (s Settings) validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, u := range s.Upstreams {
		if u.Name == "" || seen[u.Name] {
			errs = append(errs, fmt.Errorf("control: Upstreams[%d].Name %q: must be unique and not empty", i, u.Name))
		}
		seen[u.Name] = true
		if _, err := breaker.NewSlow(u.Slow); err != nil {
			errs = append(errs, fmt.Errorf("control: Upstreams[%d] (%s): %w", i, u.Name, err))
		}
		if u.MaxInflightTokens < 0 {
			errs = append(errs, fmt.Errorf("control: Upstreams[%d] (%s).MaxInflightTokens = %d, want ≥ 0", i, u.Name, u.MaxInflightTokens))
		}
		if m := u.Memory; m.VocabSize < 0 || m.VocabSize > 0 && !(m.Share > 0 && m.Share <= 1) {
			errs = append(errs, fmt.Errorf("control: Upstreams[%d] (%s).Memory = %+v: want VocabSize ≥ 0 and, when > 0, 0 < Share ≤ 1", i, u.Name, m))
		}
	}
	return errors.Join(errs...)
}

// FromPolicy maps a validated policy file onto the controller's settings:
// the one mapping that gatekeeper and the replay share.
func FromPolicy(c *config.Config) Settings {
	s := Settings{Upstreams: make([]Upstream, 0, len(c.Upstreams)), DeadlineOrder: c.Queue.Order == config.OrderEarliestDeadline}
	for _, u := range c.Upstreams {
		s.Upstreams = append(s.Upstreams, Upstream{Name: u.Name, Slow: SlowSettings(c, u),
			Memory: Memory{VocabSize: u.VocabSize, Share: c.Batch.MemoryShare}, MaxInflightTokens: u.MaxInflightTokens})
	}
	return s
}

// SlowSettings maps the policy onto one upstream's slow breaker: the rules
// (pressure.rules with the upstream's own rules merged over them) in the
// stable order of config.Signals (the first names the cause on ties), then
// the built-in PodOverload rule.
func SlowSettings(c *config.Config, u config.Upstream) breaker.SlowSettings {
	s := breaker.SlowSettings{
		Level: breaker.LevelSettings{
			Rules:      []breaker.Rule{},
			Hysteresis: c.Pressure.Hysteresis,
			Hold:       c.Pressure.Hold,
			OnStale:    stalePolicy(c.Pressure.OnStale),
		},
		Window: breaker.WindowSettings{
			MaxInflight: u.MaxInflight, MinInflight: u.MinInflight,
			Cut: c.Batch.Cut, CutEvery: c.Batch.CutEvery, Worsening: c.Batch.WorseBy,
			RampStep: c.Batch.RampStep, RampEvery: c.Batch.RampEvery, FailureHold: c.Batch.FailureHold,
		},
		QueueSignal: string(pressure.Waiting),
	}
	rules := maps.Clone(c.Pressure.Rules)
	for sig, r := range u.Rules { // the pod's own overrides; {} removes
		if rules == nil {
			rules = map[config.Signal]config.Rule{}
		}
		rules[sig] = r
	}
	for _, sig := range config.Signals() {
		r, ok := rules[sig]
		if !ok || (r.Degrade == nil && r.Shed == nil) {
			continue
		}
		rule := breaker.Rule{Signal: string(sig), Horizon: r.Horizon, For: r.For}
		if r.Shed != nil {
			rule.Shed = *r.Shed
		}
		if r.Degrade != nil {
			rule.Degrade = *r.Degrade
		} else {
			// A shed-only rule: degraded is an empty band just below shed.
			rule.Degrade = math.Nextafter(rule.Shed, math.Inf(-1))
		}
		s.Level.Rules = append(s.Level.Rules, rule)
	}
	// A pod's own 503 or 429 (its queue is full) degrades it like any rule,
	// last so a policy rule that fires with it names the cause.
	s.Level.Rules = append(s.Level.Rules, breaker.Rule{Signal: PodOverload, Degrade: PodOverloadAnswers})
	return s
}

// PodOverload is the built-in signal of a pod's own refusals (PodRefused):
// the most requests it answered 503 or 429 itself within PodOverloadWindow
// at any moment since the previous round. PodOverloadAnswers degrade it,
// which cuts its window; it recovers as any level does, once fewer have
// come for hold.
const PodOverload = "pod_overload"

func stalePolicy(p config.OnStale) breaker.StalePolicy {
	switch p {
	case config.OnStaleHold:
		return breaker.StaleHold
	case config.OnStaleIgnore:
		return breaker.StaleIgnore
	}
	return breaker.StaleDegrade
}
