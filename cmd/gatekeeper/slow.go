package main

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/breaker"
	"github.com/gatekeeper-dev/gatekeeper/config"
	"github.com/gatekeeper-dev/gatekeeper/pressure"
	"github.com/gatekeeper-dev/gatekeeper/proxy"
	"github.com/gatekeeper-dev/gatekeeper/queue"
)

// slowSettings maps the policy onto one upstream's slow breaker: the rules in
// the stable order of config.Signals (the first names the cause on ties).
func slowSettings(c *config.Config, u config.Upstream) breaker.SlowSettings {
	s := breaker.SlowSettings{
		Level: breaker.LevelSettings{
			Hysteresis: c.Pressure.Hysteresis,
			Hold:       c.Pressure.Hold,
			OnStale:    stalePolicy(c.Pressure.OnStale),
		},
		Window: breaker.WindowSettings{
			MaxInflight: u.MaxInflight, MinInflight: u.MinInflight,
			Cut: c.Batch.Cut, CutEvery: c.Batch.CutEvery, Worsening: c.Batch.WorseBy,
			RampStep: c.Batch.RampStep, RampEvery: c.Batch.RampEvery,
		},
		RetryAfter: c.Shed.RetryAfter,
	}
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
		s.Level.Rules = append(s.Level.Rules, rule)
	}
	return s
}

func stalePolicy(p config.OnStale) breaker.StalePolicy {
	switch p {
	case config.OnStaleHold:
		return breaker.StaleHold
	case config.OnStaleIgnore:
		return breaker.StaleIgnore
	}
	return breaker.StaleDegrade
}

// slowPath turns pressure readings into action for every upstream: level,
// window, availability, queue order and relief hooks. Safe for concurrent
// use; must not be copied.
type slowPath struct {
	a     *app
	hooks *proxy.HookRunner
	now   func() time.Time // nil: time.Now

	// mu guards ups and causes, and serialises observe.
	mu     sync.Mutex
	ups    map[string]*breaker.Slow
	causes map[string]levelCause
}

// levelCause is the last level change of an upstream, for /admin/state.
type levelCause struct {
	From   string    `json:"from"`
	To     string    `json:"to"`
	Signal string    `json:"signal"`
	Value  float64   `json:"value"`
	Stale  bool      `json:"stale"`
	At     time.Time `json:"at"`
}

// set builds or updates each upstream's slow breaker for cfg; a reload keeps
// the level and phase and clamps the window into the new bounds.
func (sp *slowPath) set(cfg *config.Config) error {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	next := make(map[string]*breaker.Slow, len(cfg.Upstreams))
	for _, u := range cfg.Upstreams {
		s := slowSettings(cfg, u)
		s.Now = sp.now
		if sl, ok := sp.ups[u.Name]; ok {
			if err := sl.Update(s); err != nil {
				return err
			}
			next[u.Name] = sl
			continue
		}
		sl, err := breaker.NewSlow(s)
		if err != nil {
			return err
		}
		next[u.Name] = sl
	}
	sp.ups = next
	return nil
}

// current returns an upstream's slow breaker state and its last level change.
func (sp *slowPath) current(name string) (breaker.SlowState, *levelCause, bool) {
	sp.mu.Lock()
	sl, ok := sp.ups[name]
	c, changed := sp.causes[name]
	sp.mu.Unlock()
	if !ok {
		return breaker.SlowState{}, nil, false
	}
	if !changed {
		return sl.Current(), nil, true
	}
	return sl.Current(), &c, true
}

// observe is the pressure monitor's OnUpdate: one poll round's readings.
func (sp *slowPath) observe(st pressure.State) {
	a := sp.a
	cfg := a.cfg()
	observeOnly := cfg.Mode == config.ModeObserve
	backlogEmpty := a.queue.Stats().Length == 0
	sp.mu.Lock()
	defer sp.mu.Unlock()
	shortestFirst := false
	for _, u := range cfg.Upstreams {
		sl, ok := sp.ups[u.Name]
		if !ok {
			continue
		}
		us, _ := st.Upstream(u.Name)
		upd := sl.Observe(readingsFor(us, st, u.Name, u.GPUs, cfg), backlogEmpty)
		if upd.Phase != breaker.PhaseNormal {
			shortestFirst = true
		}
		sp.apply(u, upd, observeOnly)
	}
	if !observeOnly {
		order := queue.FIFO
		if shortestFirst {
			order = queue.ShortestFirst
		}
		a.queue.SetOrder(order)
	}
}

// apply passes one upstream's update on, exactly once per change.
func (sp *slowPath) apply(u config.Upstream, upd breaker.SlowUpdate, observeOnly bool) {
	a := sp.a
	if upd.LimitChanged {
		a.handler.Metrics().Decided("window_resize", !observeOnly)
		if !observeOnly {
			a.queue.SetWindow(u.Name, upd.Limit)
		}
	}
	if !upd.LevelChanged {
		return
	}
	t := upd.Transition
	if sp.causes == nil {
		sp.causes = map[string]levelCause{}
	}
	now := time.Now
	if sp.now != nil {
		now = sp.now
	}
	sp.causes[u.Name] = levelCause{From: t.From.String(), To: t.To.String(), Signal: t.Signal,
		Value: jsonSafe(t.Value), Stale: t.Stale, At: now()}
	a.handler.SetCritical(u.Name, t.To == breaker.Critical)
	a.metrics.levelTransitions.WithLabelValues(u.Name, t.From.String(), t.To.String(), t.Signal).Inc()
	level := slog.LevelWarn
	if t.To < t.From {
		level = slog.LevelInfo
	}
	a.log.LogAttrs(context.Background(), level, "pressure level changed",
		slog.String("upstream", u.Name), slog.String("state", t.To.String()), slog.String("from", t.From.String()),
		slog.String("signal", t.Signal), slog.Float64("value", t.Value), slog.Bool("stale", t.Stale),
		slog.Int("window", upd.Limit), slog.Bool("enforced", !observeOnly))
	sp.fireHooks(u, t.To)
}

// fireHooks starts the relief hooks for entering level; they never block.
func (sp *slowPath) fireHooks(u config.Upstream, to breaker.Level) {
	hooks := sp.a.cfg().Hooks
	var list []config.Hook
	name := ""
	switch to {
	case breaker.Degraded:
		list, name = hooks.Degraded, "degraded"
	case breaker.Critical:
		list, name = hooks.Critical, "critical"
	default:
		list, name = hooks.Recovered, "recovered"
	}
	if len(list) == 0 || sp.hooks == nil {
		return
	}
	out := make([]proxy.Hook, 0, len(list))
	for _, h := range list {
		url, err := h.ResolveURL(u.URL)
		if err != nil {
			continue // validated at load; an upstream URL change cannot break it
		}
		out = append(out, proxy.Hook{Method: h.Method, URL: url, Headers: h.Headers, Body: h.Body, Timeout: h.Timeout})
	}
	sp.hooks.Fire(name, u.Name, out)
}

// readingsFor turns one upstream's signals into the breaker's readings. A
// rule whose signal is absent while one of the upstream's sources is down or
// stale gets a stale reading, so on_stale applies to a source that never
// answered (NVML without a driver, a pod whose /metrics is down).
func readingsFor(us pressure.UpstreamState, st pressure.State, name string, gpus []string, cfg *config.Config) []breaker.Reading {
	var out []breaker.Reading
	sourceStale := false
	for _, src := range st.Sources {
		// A node-level source (no upstream) matters only to pods that list GPUs.
		mine := src.Upstream == name || (src.Upstream == "" && len(gpus) > 0)
		if mine && src.Stale {
			sourceStale = true
		}
	}
	for _, sig := range config.Signals() {
		if _, ok := cfg.Pressure.Rules[sig]; !ok {
			continue
		}
		v, ok := us.Signals[pressure.Signal(sig)]
		switch {
		case ok:
			out = append(out, breaker.Reading{Signal: string(sig), Value: v.Value, Stale: v.Stale})
		case sourceStale:
			out = append(out, breaker.Reading{Signal: string(sig), Value: math.NaN(), Stale: true})
		}
	}
	return out
}

// jsonSafe maps NaN and infinities (a stale reading's value) to 0, which
// encoding/json cannot write.
func jsonSafe(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}
