package main

import (
	"context"
	"log/slog"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
)

// upstreamGate is an upstream's error breaker and the settings it was built
// with, so a reload rebuilds it only when those change.
type upstreamGate struct {
	b *breaker.ErrorBreaker
	s breaker.ErrorSettings
}

// newErrorBreaker builds an upstream's error breaker whose transitions reach
// the proxy (skip the pod while open), the log and the metrics. The settings
// were validated by config, so New cannot fail here; if it does, the pod runs
// without an error breaker and the log says so.
func (a *app) newErrorBreaker(name string, s breaker.ErrorSettings) *breaker.ErrorBreaker {
	// No push and no timer: the queue asks the breaker's state at every
	// dispatch (which moves it to half-open once open_for has passed), and
	// the health and pressure rounds make it ask again.
	s.OnChange = func(from, to breaker.State) {
		a.metrics.breakerTransitions.WithLabelValues(name, to.String()).Inc()
		a.log.LogAttrs(context.Background(), slog.LevelWarn, "error breaker changed",
			slog.String("upstream", name), slog.String("state", to.String()), slog.String("from", from.String()))
		if to == breaker.Open {
			a.podFailed(name)
		}
	}
	b, err := breaker.NewErrorBreaker(s)
	if err != nil {
		a.log.LogAttrs(context.Background(), slog.LevelError, "error breaker disabled",
			slog.String("upstream", name), slog.String("err", err.Error()))
		return b
	}
	for _, st := range []breaker.State{breaker.Closed, breaker.HalfOpen, breaker.Open} {
		a.metrics.breakerTransitions.WithLabelValues(name, st.String()) // at 0 from the start
	}
	return b
}

// podFailed tells the controller that a pod's error breaker opened with
// what its window holds (OnChange runs outside every lock, so asking the
// queue here is safe): a pod that dies under load gets a window ceiling.
func (a *app) podFailed(name string) {
	inflight := a.queue.InFlight(name)
	if !a.ctl.PodFailed(name, inflight) {
		return
	}
	ceiling, _ := a.ctl.Ceiling(name)
	a.log.LogAttrs(context.Background(), slog.LevelWarn, "window capped after a failure under load",
		slog.String("upstream", name), slog.Int("inflight", inflight), slog.Int("window", ceiling))
}

// sameErrorSettings compares the tunables of two error breaker settings
// (OnChange, a func, is not comparable and is always ours).
func sameErrorSettings(a, b breaker.ErrorSettings) bool {
	return a.Failures == b.Failures && a.OpenFor == b.OpenFor && a.HalfOpenRequests == b.HalfOpenRequests
}
