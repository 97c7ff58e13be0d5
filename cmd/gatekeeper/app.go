package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/gatekeeper-dev/gatekeeper/breaker"
	"github.com/gatekeeper-dev/gatekeeper/config"
	"github.com/gatekeeper-dev/gatekeeper/control"
	"github.com/gatekeeper-dev/gatekeeper/pressure"
	"github.com/gatekeeper-dev/gatekeeper/proxy"
	"github.com/gatekeeper-dev/gatekeeper/proxy/relief"
	"github.com/gatekeeper-dev/gatekeeper/queue"
)

// appOptions are the process-level inputs of an app.
type appOptions struct {
	log   *slog.Logger
	level *slog.LevelVar // nil: the log level is not reloadable
	path  string         // policy file; "" for the embedded default
	// transport, if set, replaces the upstream transport (tests).
	transport proxyRoundTripper
	// sources, if set, is the pressure sources' HTTP client (tests). Nil
	// means the pressure package's own.
	sources *http.Client
	// now, if set, is the slow breaker's clock (tests). Nil means time.Now.
	now func() time.Time
	// lookup, if set, resolves discovery hosts (tests). Nil means the
	// system resolver.
	lookup lookupFunc
	// stage, if set, is called as the app passes a lifecycle step: "draining",
	// "refusing", "reloaded", "reload_refused", "pressure" after each
	// pressure poll round has been acted on, and "hook" after a relief hook call. Tests use it to act at the
	// exact moment; it runs on the goroutine making the step.
	stage func(name string)
}

// fileChanges is the policy file watcher's signal: buffered, coalescing.
type fileChanges chan struct{}

// app is one running gatekeeper: the packages wired together, and the policy
// that a reload swaps. Safe for concurrent use; must not be copied.
type app struct {
	opts       appOptions
	log        *slog.Logger
	reg        *prometheus.Registry
	metrics    *appMetrics
	current    atomic.Pointer[config.Config]
	limiter    *breaker.Limiter
	queue      *queue.Queue
	handler    *proxy.Handler
	ctl        *control.Controller
	slow       *slowPath
	pressure   *pressureRunner
	hooks      *relief.Runner
	loopsCtx   atomic.Pointer[context.Context] // set by startLoops; reloads restart the monitor under it
	watcher    *config.Watcher                 // nil when running the embedded default
	adminToken atomic.Pointer[string]          // "" or nil: no token required
	changed    fileChanges

	raw    atomic.Pointer[config.Config] // the policy as written; current is it with discovery expanded
	lookup lookupFunc

	// mu serialises apply and guards gates and resolved.
	mu       sync.Mutex
	gates    map[string]*upstreamGate
	resolved resolved
}

// upstreamGate is an upstream's error breaker and the settings it was built
// with, so a reload rebuilds it only when those change.
type upstreamGate struct {
	b *breaker.ErrorBreaker
	s breaker.ErrorSettings
}

// newApp wires every package for cfg.
func newApp(raw *config.Config, opts appOptions) (*app, error) {
	a := &app{opts: opts, log: opts.log, reg: prometheus.NewRegistry(), gates: map[string]*upstreamGate{},
		lookup: opts.lookup}
	if a.lookup == nil {
		a.lookup = (&net.Resolver{}).LookupHost
	}
	a.resolved = resolve(context.Background(), a.lookup, discoveryHosts(raw), nil)
	a.raw.Store(raw)
	cfg := expand(raw, a.resolved)
	s, err := settingsFrom(cfg)
	if err != nil {
		return nil, err
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.metrics = newAppMetrics(a.reg)
	if a.limiter, err = breaker.NewLimiter(s.limiter); err != nil {
		return nil, err
	}
	if a.queue, err = queue.New(s.queue); err != nil {
		return nil, err
	}
	cs := control.FromPolicy(cfg)
	cs.Now = opts.now
	if a.ctl, err = control.New(cs); err != nil {
		return nil, err
	}
	a.setWindows(s.upstreams)
	a.handler, err = proxy.New(proxy.Options{
		Policy:       s.policy,
		Upstreams:    a.upstreams(s),
		Limiter:      a.limiter,
		Admission:    admission{a.queue},
		Levels:       a.ctl,
		Transport:    s.transport,
		Health:       s.health,
		RoundTripper: opts.transport,
		Metrics:      proxy.NewMetrics(a.reg),
		Logger:       a.log,
		Version:      version,
	})
	if err != nil {
		return nil, err
	}
	a.current.Store(cfg)
	tok, err := loadAdminToken(cfg.Server.AdminTokenFile)
	if err != nil {
		return nil, err
	}
	a.adminToken.Store(&tok)
	if a.hooks, err = relief.New(relief.Settings{OnResult: a.hookResult}); err != nil {
		return nil, err
	}
	a.queue.SetAvailability(a.availability)
	a.slow = &slowPath{a: a, ctl: a.ctl, hooks: a.hooks}
	a.pressure = &pressureRunner{log: a.log, onUpdate: func(st pressure.State) {
		a.slow.observe(st)
		a.step("pressure")
	}}
	if err := a.newWatcher(); err != nil {
		return nil, err
	}
	a.reg.MustRegister(newStateCollector(a), newPressureCollector(a.pressure.snapshot))
	return a, nil
}

// cfg returns the running policy.
func (a *app) cfg() *config.Config { return a.current.Load() }

// close releases what the app holds beyond its goroutines.
func (a *app) close() {
	if a.watcher != nil {
		_ = a.watcher.Close()
	}
}

// upstreams builds proxy's view of the pods, reusing each pod's error breaker
// while its settings stay the same. The caller holds a.mu or is newApp.
func (a *app) upstreams(s settings) []proxy.Upstream {
	out := make([]proxy.Upstream, 0, len(s.upstreams))
	next := make(map[string]*upstreamGate, len(s.upstreams))
	for _, u := range s.upstreams {
		g, ok := a.gates[u.name]
		if !ok || !sameErrorSettings(g.s, s.errors) {
			g = &upstreamGate{s: s.errors, b: a.newErrorBreaker(u.name, s.errors)}
		}
		next[u.name] = g
		up := proxy.Upstream{Name: u.name, URL: u.url}
		if g.b != nil {
			up.Gate = gate{g.b}
		}
		out = append(out, up)
	}
	a.gates = next
	return out
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
	}
	b, err := breaker.NewErrorBreaker(s)
	if err != nil {
		a.log.LogAttrs(context.Background(), slog.LevelError, "error breaker disabled",
			slog.String("upstream", name), slog.String("err", err.Error()))
	}
	return b
}

// setWindows sizes each pod's batch window at its maximum.
func (a *app) setWindows(ups []upstreamSpec) {
	for _, u := range ups {
		a.queue.SetWindow(u.name, u.maxInflight)
	}
}

// apply swaps in a reloaded, validated policy. Listener addresses need a
// restart; everything else takes effect for new requests at once, and work
// already admitted is never cancelled.
func (a *app) apply(raw *config.Config) error {
	a.mu.Lock()
	prev := a.resolved
	a.mu.Unlock()
	return a.commit(raw, resolve(context.Background(), a.lookup, discoveryHosts(raw), prev), nil)
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
func (a *app) commit(raw *config.Config, r resolved, basis *config.Config) error {
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
	resolved resolved
	s        settings
	ctl      control.Settings
	pressure pressure.Settings
	monitor  *pressure.Monitor // nil: the running monitor stays
	token    string
}

// prepare builds everything raw needs and checks it against every package,
// changing nothing that runs. The caller holds a.mu.
func (a *app) prepare(raw *config.Config, r resolved) (*next, error) {
	n := &next{raw: raw, resolved: r, cfg: expand(raw, r)}
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
	if err := a.ctl.Check(n.ctl); err != nil {
		return nil, err
	}
	n.pressure = a.pressureSettings(n.cfg)
	if ctx := a.loopsCtx.Load(); ctx != nil {
		if n.monitor, err = a.pressure.prepare(n.pressure); err != nil {
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
	_ = a.queue.UpdateSettings(n.s.queue)
	_ = a.ctl.Update(n.ctl)
	for _, name := range a.handler.SetUpstreams(a.upstreams(n.s)) {
		a.queue.RemoveWindow(name)
	}
	a.handler.SetPolicy(n.s.policy)
	// Each pod's window: the controller's (cut windows stay cut across a
	// reload, clamped into the new bounds); at its maximum in observe mode.
	for _, u := range n.s.upstreams {
		limit := u.maxInflight
		if st, _, ok := a.ctl.State(u.name); ok && n.cfg.Mode != config.ModeObserve {
			limit = st.Limit
		}
		a.queue.SetWindow(u.name, limit)
	}
	if ctx := a.loopsCtx.Load(); ctx != nil {
		a.pressure.start(*ctx, n.monitor, n.pressure)
	}
	if a.opts.level != nil {
		a.opts.level.Set(n.cfg.Log.Level.Slog())
	}
	if restart := restartOnly(config.Diff(old, n.cfg)); len(restart) > 0 {
		a.log.LogAttrs(context.Background(), slog.LevelWarn, "these keys take effect only after a restart",
			slog.String("state", "pending_restart"), slog.Any("keys", restart))
	}
	a.resolved = n.resolved
	a.raw.Store(n.raw)
	a.current.Store(n.cfg)
}

// reload reads the policy file again and applies it if it validates; a file
// that does not is refused with a log line and a counter, and the running
// policy stays.
func (a *app) reload(trigger string) {
	if a.opts.path == "" {
		a.log.LogAttrs(context.Background(), slog.LevelInfo, "reload skipped: running the embedded default",
			slog.String("state", "unchanged"))
		return
	}
	cfg, err := config.LoadFile(a.opts.path)
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
	a.log.LogAttrs(context.Background(), slog.LevelInfo, "policy reloaded",
		slog.String("state", "reloaded"), slog.String("trigger", trigger))
	a.step("reloaded")
}

// step reports a lifecycle step to opts.stage.
func (a *app) step(name string) {
	if a.opts.stage != nil {
		a.opts.stage(name)
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

// startLoops starts the app's background loops beyond the health check: the
// pressure monitor and the relief hook runner. They stop when ctx ends.
func (a *app) startLoops(ctx context.Context, wg *sync.WaitGroup) error {
	a.loopsCtx.Store(&ctx)
	wg.Go(func() { _ = a.hooks.Run(ctx) })
	wg.Go(func() { a.discover(ctx) })
	if err := a.pressure.apply(ctx, a.pressureSettings(a.cfg())); err != nil {
		return err
	}
	wg.Go(func() {
		<-ctx.Done()
		a.pressure.stop()
	})
	return nil
}

// hookResult logs and counts one relief hook call.
func (a *app) hookResult(r relief.Result) {
	a.metrics.hookCalls.WithLabelValues(r.Level, r.Outcome()).Inc()
	level := slog.LevelInfo
	attrs := []slog.Attr{slog.String("upstream", r.Upstream), slog.String("state", r.Level),
		slog.String("url", r.URL), slog.Int("status", r.Status), slog.Duration("duration", r.Duration)}
	if r.Err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("err", r.Err.Error()))
	}
	a.log.LogAttrs(context.Background(), level, "relief hook called", attrs...)
	a.step("hook")
}

// appMetrics are the series the command owns itself.
type appMetrics struct {
	reloads            *prometheus.CounterVec
	reloadTime         prometheus.Gauge
	breakerTransitions *prometheus.CounterVec
	levelTransitions   *prometheus.CounterVec
	hookCalls          *prometheus.CounterVec
}

func newAppMetrics(reg prometheus.Registerer) *appMetrics {
	m := &appMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_config_reloads_total",
			Help: "Policy reloads, by result (success, error).",
		}, []string{"result"}),
		reloadTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gatekeeper_config_last_reload_success_timestamp_seconds",
			Help: "When the policy was last loaded successfully.",
		}),
		breakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_error_breaker_transitions_total",
			Help: "Error breaker transitions per upstream, by the state entered.",
		}, []string{"upstream", "state"}),
		levelTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_level_transitions_total",
			Help: "Pressure level changes per upstream, with the signal that caused them.",
		}, []string{"upstream", "from", "to", "signal"}),
		hookCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatekeeper_hook_calls_total",
			Help: "Relief hook calls by level hook and result (ok, error, timeout, skipped, canceled).",
		}, []string{"hook", "result"}),
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "gatekeeper_build_info",
		Help:        "Always 1; the version label says which gatekeeper runs.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	info.Set(1)
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("error")
	m.reloadTime.SetToCurrentTime()
	reg.MustRegister(m.reloads, m.reloadTime, m.breakerTransitions, m.levelTransitions, m.hookCalls, info)
	return m
}

// sameErrorSettings compares the tunables of two error breaker settings
// (OnChange, a func, is not comparable and is always ours).
func sameErrorSettings(a, b breaker.ErrorSettings) bool {
	return a.Failures == b.Failures && a.OpenFor == b.OpenFor && a.HalfOpenRequests == b.HalfOpenRequests
}

// restartOnly keeps the changed keys that a reload cannot apply: the
// listeners and their http.Server limits, the upstream transport and the
// health check. (server.max_body_bytes, request_id_header, drain_delay and
// shutdown_timeout are read per request or at shutdown, so they apply.)
func restartOnly(changed []string) []string {
	var out []string
	for _, k := range changed {
		switch {
		case k == "server.listen", k == "server.admin_listen", k == "server.read_header_timeout",
			k == "server.idle_timeout", k == "server.max_header_bytes", k == "server.max_concurrent_streams",
			strings.HasPrefix(k, "server.tls"),
			strings.HasPrefix(k, "transport."), strings.HasPrefix(k, "health_check."):
			out = append(out, k)
		}
	}
	return out
}
