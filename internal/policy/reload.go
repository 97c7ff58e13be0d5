package policy

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

// metrics are the reload series.
type metrics struct {
	reloads    *prometheus.CounterVec
	reloadTime prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_config_reloads_total",
			Help: "Policy reloads, by result (success, error).",
		}, []string{"result"}),
		reloadTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gatekeeper_config_last_reload_success_timestamp_seconds",
			Help: "When the policy was last loaded successfully.",
		}),
	}
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("error")
	m.reloadTime.SetToCurrentTime()
	if reg != nil {
		reg.MustRegister(m.reloads, m.reloadTime)
	}
	return m
}

// Reload reads the policy file again and applies it if it validates; a file
// that does not is refused with a log line and a counter, and the running
// policy stays. An applied reload logs "policy reloaded" and then one
// "policy key changed" line per key it changed, with its old and new values
// (secrets masked; config.Changes), so a file applied half-written (issue
// 35) shows in the log as the keys it took away and then put back. Call it
// from one goroutine at a time (the watcher's); trigger names the cause.
func (k *Keeper) Reload(trigger string) {
	if k.o.Path == "" {
		k.o.Log.LogAttrs(context.Background(), slog.LevelInfo, "reload skipped: running the embedded default",
			slog.String("state", "unchanged"))
		return
	}
	prev := k.raw.Load()
	cfg, err := LoadRunnable(k.o.Path, k.o.NVML)
	if err == nil {
		err = k.Set(cfg)
	}
	if err != nil {
		k.metrics.reloads.WithLabelValues("error").Inc()
		k.o.Log.LogAttrs(context.Background(), slog.LevelError, "policy reload refused; keeping the running policy",
			slog.String("state", "refused"), slog.String("trigger", trigger), slog.String("err", err.Error()))
		k.step("reload_refused")
		return
	}
	k.metrics.reloads.WithLabelValues("success").Inc()
	k.metrics.reloadTime.SetToCurrentTime()
	k.reloads++
	k.logChanges(trigger, config.Changes(prev, cfg))
	k.step("reloaded")
}

// logChanges writes an applied reload's lines: a summary, then one line per
// changed key. One line per key, not one for the whole reload, so that
// every attribute is a scalar with a fixed name (key, old, new: a log store
// indexes them and finds key="fast_breaker.qps" exactly, with no map of
// policy paths to blow up its fields), and a large value (a whole upstream
// list) makes one long line, not a reload line past a collector's size
// limit. The lines of one reload share its "reload" number.
func (k *Keeper) logChanges(trigger string, changes []config.Change) {
	ctx := context.Background()
	k.o.Log.LogAttrs(ctx, slog.LevelInfo, "policy reloaded", slog.String("state", "reloaded"),
		slog.String("trigger", trigger), slog.Int("reload", k.reloads), slog.Int("changed", len(changes)))
	for _, c := range changes {
		k.o.Log.LogAttrs(ctx, slog.LevelInfo, "policy key changed", slog.String("trigger", trigger),
			slog.Int("reload", k.reloads), slog.String("key", c.Path), slog.String("old", c.Old), slog.String("new", c.New))
	}
}
