package main

import (
	"context"
	"log/slog"

	"github.com/gatekeeper-dev/gatekeeper/internal/cluster"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/relief"
)

// slowPath applies the controller's decisions (package control) to the
// running app: windows and order to the queue, level changes to the log,
// metrics and relief hooks. Whether a pod takes new work is not pushed: the
// queue and proxy read the controller at dispatch. It holds no lock of its
// own; the controller serialises its rounds, and observe is called from the
// pressure monitor's one notify goroutine.
type slowPath struct {
	a     *app
	ctl   *control.Controller
	hooks *relief.Runner
}

// observe is the pressure monitor's OnUpdate: one poll round's readings.
func (sp *slowPath) observe(st pressure.State) {
	a := sp.a
	cfg := a.cfg()
	enforce := cfg.Mode != config.ModeObserve
	d := sp.ctl.Observe(st, a.queue.Stats().Length == 0)
	d.Apply(boundedWindows{a.windows, a.queue}, enforce) // the queue's windows, at this replica's share in cluster mode
	for i, ch := range d.Upstreams {
		sp.report(cfg, &d.Upstreams[i], ch.Name, enforce)
	}
	// Availability is read at dispatch: look again now, so a pod that left
	// critical, or whose error breaker's open time ended, takes its waiters.
	a.queue.Dispatch()
}

// podRefused is the proxy's and the picker's OnPodRefused: a pod answered
// 503 or 429 itself. The controller counts it; when that makes the pod
// overloaded (control.PodOverloadAnswers), a round runs now rather than at
// the next poll, on the pressure monitor's goroutine like every round.
func (a *app) podRefused(name string) {
	if a.ctl.PodRefused(name) {
		a.pressure.Notify()
	}
}

// decisionWindowResize is the gatekeeper_decisions_total decision of a
// window change the slow breaker made.
const decisionWindowResize = "window_resize"

// report passes one upstream's change to the log, the metrics and the
// relief hooks, exactly once.
func (sp *slowPath) report(cfg *config.Config, ch *control.Change, name string, enforce bool) {
	a := sp.a
	if ch.LimitChanged {
		a.reqMetrics.Decided(decisionWindowResize, enforce)
	}
	if !ch.LevelChanged {
		return
	}
	c := ch.Cause
	a.metrics.levelTransitions.WithLabelValues(name, c.From, c.To, c.Signal).Inc()
	level := slog.LevelWarn
	if ch.Transition.To < ch.Transition.From {
		level = slog.LevelInfo
	}
	a.log.LogAttrs(context.Background(), level, "pressure level changed",
		slog.String("upstream", name), slog.String("state", c.To), slog.String("from", c.From),
		slog.String("signal", c.Signal), slog.Float64("value", c.Value), slog.Bool("stale", c.Stale),
		slog.String("source", c.Source), slog.Int("window", ch.Limit), slog.Bool("enforced", enforce))
	sp.fireHooks(cfg, name, ch.Hook)
}

// fireHooks starts the relief hooks of one level event; they never block.
func (sp *slowPath) fireHooks(cfg *config.Config, name string, event control.Hook) {
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
	if len(list) == 0 || sp.hooks == nil || !ok {
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
	sp.hooks.Fire(string(event), name, out)
}

func upstreamNamed(cfg *config.Config, name string) (config.Upstream, bool) {
	for _, u := range cfg.Upstreams {
		if u.Name == name {
			return u, true
		}
	}
	return config.Upstream{}, false
}

// boundedWindows applies the controller's decisions through cluster.Windows,
// so that in cluster mode each value the queue enforces is this replica's
// part of it (cluster.Scale); the order goes to the queue as it is.
type boundedWindows struct {
	*cluster.Windows
	q *queue.Queue
}

func (w boundedWindows) SetWindowOrder(name string, o queue.Order) { w.q.SetWindowOrder(name, o) }
