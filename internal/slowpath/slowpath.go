// Package slowpath applies the controller's rounds (package control) to a
// running gatekeeper: each pod's window, budgets and order to the queue
// (through cluster.Windows, at this replica's share in cluster mode), and
// each level change to the log, the metrics and the relief hooks, which it
// runs. After each round the pod registry republishes each pod's
// availability (Refresh: the levels are part of it), which the queue reads
// at dispatch without calling out.
//
// A round runs once per pressure round (pressure.Settings.OnUpdate: after
// every source has reported, or at once after a pod's own refusals made
// it overloaded, PodRefused).
package slowpath

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatekeeper-dev/gatekeeper/internal/cluster"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/relief"
	"github.com/gatekeeper-dev/gatekeeper/internal/route"
)

// DecisionWindowResize is the gatekeeper_decisions_total decision of a
// window change the slow breaker made.
const DecisionWindowResize = "window_resize"

// Settings configures a Path. Every field but Refresh, Log, Registerer,
// Step and Router is required.
type Settings struct {
	Controller *control.Controller
	Queue      *queue.Queue
	Windows    *cluster.Windows
	// Refresh republishes every pod's availability after a round
	// (pods.Registry.Refresh): a level is part of it. Nil: nothing to
	// republish (a queue that asks the controller itself).
	Refresh func()
	// Config returns the running policy: its mode and hooks.
	Config func() *config.Config
	// Decided counts one decision of the fronts' gatekeeper_decisions_total
	// (proxy.Metrics.Decided).
	Decided func(decision string, enforced bool)
	// Log receives the level changes and hook calls. Nil means discard.
	Log *slog.Logger
	// Registerer receives the level-transition and hook-call series. Nil:
	// not registered.
	Registerer prometheus.Registerer
	// Step, if set, hears "hook" after each relief hook call (tests).
	Step func(string)
	// Router, if set, is the pod scorer: every round sets each pod's
	// inputs (PodState). Nil: no pod scoring.
	Router *route.Router
}

// Path is the slow path. Create one with New. It holds no lock of its own:
// the controller serialises its rounds, and Observe is called from the
// pressure monitor's one notify goroutine. Safe for concurrent use.
type Path struct {
	s     Settings
	hooks *relief.Runner
	m     metrics
}

// New returns a Path and its relief hook runner, which Run runs.
func New(s Settings) (*Path, error) {
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	if s.Refresh == nil {
		s.Refresh = func() {}
	}
	p := &Path{s: s, m: newMetrics(s.Registerer)}
	var err error
	if p.hooks, err = relief.New(relief.Settings{OnResult: p.hookResult}); err != nil {
		return nil, err
	}
	return p, nil
}

// Run runs the relief hooks until ctx ends.
func (p *Path) Run(ctx context.Context) error { return p.hooks.Run(ctx) }

// Observe is the pressure monitor's OnUpdate: one round's readings.
func (p *Path) Observe(st pressure.State) {
	cfg := p.s.Config()
	enforce := cfg.Mode != config.ModeObserve
	qs := p.s.Queue.Stats()
	d := p.s.Controller.Observe(st, qs.Length == 0)
	d.Apply(windows{p.s.Windows, p.s.Queue}, enforce) // the queue's windows, at this replica's share in cluster mode
	for i, ch := range d.Upstreams {
		p.report(cfg, &d.Upstreams[i], ch.Name, enforce)
	}
	p.setPods(cfg, st, qs)
	// Publish the levels, and look again now: a pod that left critical, or
	// whose error breaker's open time ended, takes its waiters.
	p.s.Refresh()
	p.s.Queue.Dispatch()
}

// windows applies the controller's decisions through cluster.Windows; the
// order goes to the queue as it is.
type windows struct {
	*cluster.Windows
	q *queue.Queue
}

func (w windows) SetWindowOrder(name string, o queue.Order) { w.q.SetWindowOrder(name, o) }

// report passes one upstream's change to the log, the metrics and the
// relief hooks, exactly once.
func (p *Path) report(cfg *config.Config, ch *control.Change, name string, enforce bool) {
	if ch.LimitChanged {
		p.s.Decided(DecisionWindowResize, enforce)
	}
	if !ch.LevelChanged {
		return
	}
	c := ch.Cause
	p.m.levelTransitions.WithLabelValues(name, c.From, c.To, c.Signal).Inc()
	level := slog.LevelWarn
	if ch.Transition.To < ch.Transition.From {
		level = slog.LevelInfo
	}
	p.s.Log.LogAttrs(context.Background(), level, "pressure level changed",
		slog.String("upstream", name), slog.String("state", c.To), slog.String("from", c.From),
		slog.String("signal", c.Signal), slog.Float64("value", c.Value), slog.Bool("stale", c.Stale),
		slog.String("source", c.Source), slog.Int("window", ch.Limit), slog.Bool("enforced", enforce))
	p.fireHooks(cfg, name, ch.Hook)
}

// fireHooks starts the relief hooks of one level event; they never block.
func (p *Path) fireHooks(cfg *config.Config, name string, event control.Hook) {
	var list []config.Hook
	switch event {
	case control.Degraded:
		list = cfg.Hooks.Degraded
	case control.Critical:
		list = cfg.Hooks.Critical
	case control.Recovered:
		list = cfg.Hooks.Recovered
	}
	u, ok := upstreamNamed(cfg, name)
	if len(list) == 0 || !ok {
		return
	}
	out := make([]relief.Hook, 0, len(list))
	for _, h := range list {
		url, err := h.ResolveURL(u.URL)
		if err != nil {
			continue // validated at load; an upstream URL change cannot break it
		}
		out = append(out, relief.Hook{Method: h.Method, URL: url, Headers: h.Headers, Body: h.Body, Timeout: h.Timeout})
	}
	p.hooks.Fire(string(event), name, out)
}

func upstreamNamed(cfg *config.Config, name string) (config.Upstream, bool) {
	for _, u := range cfg.Upstreams {
		if u.Name == name {
			return u, true
		}
	}
	return config.Upstream{}, false
}

// hookResult logs and counts one relief hook call.
func (p *Path) hookResult(r relief.Result) {
	p.m.hookCalls.WithLabelValues(r.Level, r.Outcome()).Inc()
	level := slog.LevelInfo
	attrs := []slog.Attr{slog.String("upstream", r.Upstream), slog.String("state", r.Level),
		slog.String("url", r.URL), slog.Int("status", r.Status), slog.Float64("duration_s", r.Duration.Seconds())}
	if r.Err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("err", r.Err.Error()))
	}
	p.s.Log.LogAttrs(context.Background(), level, "relief hook called", attrs...)
	if p.s.Step != nil {
		p.s.Step("hook")
	}
}

// metrics are the slow path's series.
type metrics struct {
	levelTransitions *prometheus.CounterVec
	hookCalls        *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		levelTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_level_transitions_total",
			Help: "Pressure level changes per upstream, with the signal that caused them.",
		}, []string{"upstream", "from", "to", "signal"}),
		hookCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_hook_calls_total",
			Help: "Relief hook calls by level hook and result (ok, error, timeout, skipped, canceled).",
		}, []string{"hook", "result"}),
	}
	for _, hook := range []control.Hook{control.Degraded, control.Critical, control.Recovered} {
		for _, result := range relief.Outcomes { // 15 series, there from the start
			m.hookCalls.WithLabelValues(string(hook), result)
		}
	}
	if reg != nil {
		reg.MustRegister(m.levelTransitions, m.hookCalls)
	}
	return m
}
