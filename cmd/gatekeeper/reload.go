package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/discovery"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// The one path by which a policy takes effect, and what triggers it: the
// file watcher, SIGHUP and discovery rounds (discovery.go).

// apply swaps in a reloaded, validated policy. Listener addresses need a
// restart; everything else takes effect for new requests at once, and work
// already admitted is never cancelled.
func (a *app) apply(raw *config.Config) error {
	a.mu.Lock()
	prev := a.resolved
	a.mu.Unlock()
	if err := a.commit(raw, discovery.Resolve(context.Background(), a.lookup, discovery.Hosts(raw), prev), nil); err != nil {
		return err
	}
	if ctx := a.loopsCtx.Load(); ctx != nil { // the pools the new policy names
		if err := a.watchPools(*ctx); err != nil {
			a.log.LogAttrs(*ctx, slog.LevelError, "InferencePool watch not updated", slog.String("err", err.Error()))
		}
	}
	return nil
}

// errPolicyMoved: a discovery round resolved for a policy that a reload
// replaced meanwhile; its result is dropped (the next round uses the new one).
var errPolicyMoved = errors.New("gatekeeper: the policy changed during the lookup")

// commit is the one path by which a policy takes effect (start, reload,
// SIGHUP, discovery round): raw with its discovery upstreams expanded to r
// is built and validated whole, then swapped in under a.mu in one step that
// cannot fail; on error nothing running has changed. basis, when not nil, is
// the policy a discovery round resolved for: if a reload has replaced it
// since, errPolicyMoved and nothing changes, so a round never applies an
// older policy than the running one.
func (a *app) commit(raw *config.Config, r discovery.Resolved, basis *config.Config) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if basis != nil && a.raw.Load() != basis {
		return errPolicyMoved
	}
	n, err := a.prepare(raw, r)
	if err != nil {
		return err
	}
	a.swap(n)
	return nil
}

// next is a policy built and validated, ready to swap in.
type next struct {
	raw, cfg *config.Config
	resolved discovery.Resolved
	ownNS    string
	s        settings
	ctl      control.Settings
	pressure pressure.Settings
	monitor  *pressure.Monitor // nil: the running monitor stays
	token    string
}

// prepare builds everything raw needs and checks it against every package,
// changing nothing that runs. The caller holds a.mu.
func (a *app) prepare(raw *config.Config, r discovery.Resolved) (*next, error) {
	ns := a.ownNS
	if ns == "" { // a reload may name the first pool without a namespace
		var err error
		if ns, err = ownNamespace(raw, a.opts.namespace); err != nil {
			return nil, err
		}
	}
	n := &next{raw: raw, resolved: r, cfg: a.expand(raw, r, ns), ownNS: ns}
	var err error
	if n.s, err = settingsFrom(n.cfg); err != nil {
		return nil, err
	}
	if n.token, err = loadAdminToken(n.cfg.Server.AdminTokenFile); err != nil {
		return nil, err
	}
	n.ctl = control.FromPolicy(n.cfg)
	if _, err := breaker.NewLimiter(n.s.limiter); err != nil {
		return nil, err
	}
	if _, err := queue.NewCore(n.s.queue); err != nil {
		return nil, err
	}
	if err := errors.Join(breaker.CheckLimiterSet(n.s.classes), breaker.CheckLimiterSet(n.s.models), n.s.quotas.Validate()); err != nil {
		return nil, err
	}
	if err := a.ctl.Check(n.ctl); err != nil {
		return nil, err
	}
	n.pressure = a.pressureSettings(n.cfg)
	if ctx := a.loopsCtx.Load(); ctx != nil {
		if n.monitor, err = a.pressure.Prepare(n.pressure); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// swap puts a prepared policy in place. Every step was validated by prepare,
// so none fails. The caller holds a.mu.
func (a *app) swap(n *next) {
	old := a.cfg()
	a.adminToken.Store(&n.token)
	_ = a.limiter.Update(n.s.limiter)
	if a.shared != nil {
		_ = a.shared.gate.Update(n.s.limiter) // same rules as the local limiter's, checked in prepare
		_ = a.shared.gate.SetKeyed(n.s.classes, n.s.models)
	}
	_ = a.classLimit.Set(n.s.classes) // checked by prepare
	_ = a.modelLimit.Set(n.s.models)
	_ = a.setQuotas(n.s.quotas) // checked by prepare
	_ = a.queue.UpdateSettings(n.s.queue)
	_ = a.ctl.Update(n.ctl)
	for _, name := range a.setPods(upstreams(n.s)) {
		a.dropBound(name)
	}
	if a.shared != nil {
		a.shared.c.SetPods(basesOf(n.s.upstreams))
	}
	a.core.SetPolicy(n.s.policy)
	// Each pod's window: the controller's (cut windows stay cut across a
	// reload, clamped into the new bounds); at its maximum in observe mode.
	for _, u := range n.s.upstreams {
		limit := u.maxInflight
		if st, _, ok := a.ctl.State(u.name); ok && n.cfg.Mode != config.ModeObserve {
			limit = st.Limit
		}
		a.updateBound(u.name, func(b *bound) { b.limit = limit })
	}
	if ctx := a.loopsCtx.Load(); ctx != nil {
		a.pressure.Start(*ctx, n.monitor, n.pressure)
	}
	if a.opts.level != nil {
		a.opts.level.Set(n.cfg.Log.Level.Slog())
	}
	if restart := config.RestartOnly(config.Diff(old, n.cfg)); len(restart) > 0 {
		a.log.LogAttrs(context.Background(), slog.LevelWarn, "these keys take effect only after a restart",
			slog.String("state", "pending_restart"), slog.Any("keys", restart))
	}
	a.resolved = n.resolved
	a.ownNS = n.ownNS
	a.raw.Store(n.raw)
	a.current.Store(n.cfg)
}

// reload reads the policy file again and applies it if it validates; a file
// that does not is refused with a log line and a counter, and the running
// policy stays. An applied reload logs "policy reloaded" and then one
// "policy key changed" line per key it changed, with its old and new values
// (secrets masked; config.Changes), so a file applied half-written (issue
// 35) shows in the log as the keys it took away and then put back. It runs
// on one goroutine at a time (watchConfig's).
func (a *app) reload(trigger string) {
	if a.opts.path == "" {
		a.log.LogAttrs(context.Background(), slog.LevelInfo, "reload skipped: running the embedded default",
			slog.String("state", "unchanged"))
		return
	}
	prev := a.raw.Load()
	cfg, err := loadRunnable(a.opts.path)
	if err == nil {
		err = a.apply(cfg)
	}
	if err != nil {
		a.metrics.reloads.WithLabelValues("error").Inc()
		a.log.LogAttrs(context.Background(), slog.LevelError, "policy reload refused; keeping the running policy",
			slog.String("state", "refused"), slog.String("trigger", trigger), slog.String("err", err.Error()))
		a.step("reload_refused")
		return
	}
	a.metrics.reloads.WithLabelValues("success").Inc()
	a.metrics.reloadTime.SetToCurrentTime()
	a.reloads++
	a.logChanges(trigger, config.Changes(prev, cfg))
	a.step("reloaded")
}

// logChanges writes an applied reload's lines: a summary, then one line per
// changed key. One line per key, not one for the whole reload, so that
// every attribute is a scalar with a fixed name (key, old, new: a log store
// indexes them and finds key="fast_breaker.qps" exactly, with no map of
// policy paths to blow up its fields), and a large value (a whole upstream
// list) makes one long line, not a reload line past a collector's size
// limit. The lines of one reload share its "reload" number.
func (a *app) logChanges(trigger string, changes []config.Change) {
	ctx := context.Background()
	a.log.LogAttrs(ctx, slog.LevelInfo, "policy reloaded", slog.String("state", "reloaded"),
		slog.String("trigger", trigger), slog.Int("reload", a.reloads), slog.Int("changed", len(changes)))
	for _, c := range changes {
		a.log.LogAttrs(ctx, slog.LevelInfo, "policy key changed", slog.String("trigger", trigger),
			slog.Int("reload", a.reloads), slog.String("key", c.Path), slog.String("old", c.Old), slog.String("new", c.New))
	}
}

// newWatcher starts watching the policy file right after it was loaded, so
// an edit made from now on is seen (the watcher remembers this content).
func (a *app) newWatcher() error {
	a.changed = make(fileChanges, 1)
	if a.opts.path == "" {
		return nil
	}
	w, err := config.NewWatcher(config.WatchSettings{
		Path: a.opts.path,
		OnChange: func() {
			select {
			case a.changed <- struct{}{}:
			default:
			}
		},
		OnError: func(err error) {
			a.log.LogAttrs(context.Background(), slog.LevelWarn, "policy file watch trouble; SIGHUP still reloads",
				slog.String("err", err.Error()))
		},
	})
	if err != nil {
		return err
	}
	a.watcher = w
	return nil
}

// watchConfig reloads on SIGHUP and when the file changes (a ConfigMap
// symlink swap included) until ctx ends.
func (a *app) watchConfig(ctx context.Context, hup <-chan os.Signal) {
	var wg sync.WaitGroup
	if a.watcher != nil {
		wg.Go(func() { _ = a.watcher.Run(ctx) })
	}
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			a.reload("sighup")
		case <-a.changed:
			a.reload("file_change")
		}
	}
}
