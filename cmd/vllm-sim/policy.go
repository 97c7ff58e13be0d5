package main

import (
	"math"
	"net/url"
	"strings"

	"github.com/gatekeeper-dev/gatekeeper/breaker"
	"github.com/gatekeeper-dev/gatekeeper/config"
	"github.com/gatekeeper-dev/gatekeeper/queue"
	"github.com/gatekeeper-dev/gatekeeper/sim/replay"
)

// emptyCachePath is the simulated pod's relief endpoint (sim/server).
const emptyCachePath = "/v1/internal/empty_cache"

// applyPolicy maps a validated policy file onto the replay's gatekeeper
// policy, as cmd/gatekeeper maps it onto the proxy (settings.go settingsFrom,
// slow.go slowSettings): fast_breaker, pressure (rules in config.Signals
// order, hysteresis, hold, on_stale, interval), batch, queue, shed and the
// first upstream's max/min_inflight. A degraded or critical hook that POSTs
// the pod's empty_cache endpoint turns on the replay's relief hook. What the
// replay has no counterpart for is left out: mode (the replay always
// enforces: the question is what the policy would have done), per-client
// limits (a trace has no client keys), sources (the replay reads the engine
// directly), the upstream breaker and health check (one availability
// switch, sim/replay/README.md), server, transport, estimate and log.
func applyPolicy(c *config.Config, s replay.Settings) replay.Settings {
	s.Limiter = breaker.LimiterSettings{QPS: c.FastBreaker.QPS, Burst: c.FastBreaker.Burst}
	s.LimiterOff = c.FastBreaker.QPS == 0
	s.Slow = breaker.SlowSettings{
		Level: breaker.LevelSettings{
			Hysteresis: c.Pressure.Hysteresis,
			Hold:       c.Pressure.Hold,
			OnStale:    stalePolicy(c.Pressure.OnStale),
		},
		Window: breaker.WindowSettings{
			Cut: c.Batch.Cut, CutEvery: c.Batch.CutEvery, Worsening: c.Batch.WorseBy,
			RampStep: c.Batch.RampStep, RampEvery: c.Batch.RampEvery,
		},
		RetryAfter: c.Shed.RetryAfter,
	}
	if len(c.Upstreams) > 0 {
		u := c.Upstreams[0]
		s.Slow.Window.MaxInflight, s.Slow.Window.MinInflight = u.MaxInflight, u.MinInflight
	}
	// An empty, non-nil list: a file without rules never leaves normal
	// (replay.Settings reads nil Rules as the defaults).
	s.Slow.Level.Rules = []breaker.Rule{}
	for _, sig := range config.Signals() {
		r, ok := c.Pressure.Rules[sig]
		if !ok || (r.Degrade == nil && r.Shed == nil) {
			continue
		}
		rule := breaker.Rule{Signal: string(sig)}
		if r.Shed != nil {
			rule.Shed = *r.Shed
		}
		if r.Degrade != nil {
			rule.Degrade = *r.Degrade
		} else {
			// A shed-only rule: degraded is an empty band just below shed.
			rule.Degrade = math.Nextafter(rule.Shed, math.Inf(-1))
		}
		s.Slow.Level.Rules = append(s.Slow.Level.Rules, rule)
	}
	s.Queue = queue.Settings{
		MaxLength:       c.Queue.MaxLength,
		MaxTokens:       c.Queue.MaxTokens,
		StarvationAfter: c.Queue.StarvationAfter,
	}
	s.MaxWait = c.Queue.MaxWait
	s.Interval = c.Pressure.Interval
	s.EmptyCacheOnDegraded = false
	for _, h := range append(append([]config.Hook(nil), c.Hooks.Degraded...), c.Hooks.Critical...) {
		if isEmptyCache(h) {
			s.EmptyCacheOnDegraded = true
		}
	}
	return s
}

// isEmptyCache reports whether a hook calls the pod's empty_cache endpoint.
func isEmptyCache(h config.Hook) bool {
	if h.Method != "" && !strings.EqualFold(h.Method, "POST") {
		return false
	}
	u, err := url.Parse(h.URL)
	return err == nil && u.Path == emptyCachePath
}

// stalePolicy maps on_stale as cmd/gatekeeper does.
func stalePolicy(p config.OnStale) breaker.StalePolicy {
	switch p {
	case config.OnStaleHold:
		return breaker.StaleHold
	case config.OnStaleIgnore:
		return breaker.StaleIgnore
	}
	return breaker.StaleDegrade
}
