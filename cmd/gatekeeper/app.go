package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/gatekeeper-dev/gatekeeper/internal/admin"
	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/cluster"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/discovery"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/proxy"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/quota"
	"github.com/gatekeeper-dev/gatekeeper/internal/relief"
	"github.com/gatekeeper-dev/gatekeeper/internal/telemetry"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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
	lookup discovery.Lookup
	// kube, if set, are the Kubernetes clients the InferencePool watch uses
	// (tests pass fakes). Nil: in-cluster config, or $KUBECONFIG.
	kube *kubeClients
	// namespace, if set, is gatekeeper's own namespace (tests). "": the
	// service account's namespace file, or $POD_NAMESPACE.
	namespace string
	// getenv reads OTEL_* for tracing (nil: none set); spanExporter, if
	// set, replaces the OTLP exporter (tests).
	getenv       func(string) string
	spanExporter sdktrace.SpanExporter
	// stage, if set, is called as the app passes a lifecycle step: "draining",
	// "refusing", "reloaded", "reload_refused", "pressure" after each
	// pressure poll round has been acted on, "hook" after a relief hook call,
	// and "cluster_up" / "cluster_down" when Redis mode switches. Tests use it to act at the
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
	reg        *registry
	metrics    *appMetrics
	conns      *clientConns // the traffic listener's open connections
	current    atomic.Pointer[config.Config]
	limiter    *breaker.Limiter
	classLimit breaker.LimiterSet // per traffic class
	quotas     *quota.Quotas      // token quotas (this replica's share in cluster mode); no limits without a quotas section
	shQuotas   *cluster.Quotas    // the quotas over every replica; nil without a cluster section
	modelLimit breaker.LimiterSet // per model
	queue      *queue.Queue
	pods       *pods.Registry // the decision core's pods
	core       *decide.Core   // what both fronts ask
	handler    *proxy.Handler
	reqMetrics *proxy.Metrics // the request metrics both fronts record
	ctl        *control.Controller
	tracer     *telemetry.Provider // nil without a tracing section
	shared     *shared             // nil without a cluster section
	bounds     bounds              // each pod's window and budgets, as the slow breaker sets them
	slow       *slowPath
	pressure   *pressure.Runner
	hooks      *relief.Runner
	loopsCtx   atomic.Pointer[context.Context] // set by startLoops; reloads restart the monitor under it
	watcher    *config.Watcher                 // nil when running the embedded default
	adminToken atomic.Pointer[string]          // "" or nil: no token required
	changed    fileChanges
	// pickerHealthAddr is the endpoint picker's plaintext health address
	// once it listens (tests dial it).
	pickerHealthAddr atomic.Value

	raw    atomic.Pointer[config.Config] // the policy as written; current is it with discovery expanded
	lookup discovery.Lookup
	// reloads numbers the applied reloads, so the log lines of one carry
	// the same "reload" (reload.go); touched only by reload's goroutine.
	reloads int

	// mu serialises apply and guards gates, resolved, pools and poolWatch.
	mu        sync.Mutex
	gates     map[string]*upstreamGate
	resolved  discovery.Resolved
	pools     discovery.Pools // each watched InferencePool's endpoints
	poolWatch *poolWatch      // nil until the policy names a pool
	ownNS     string          // gatekeeper's namespace, for pools that name none
}

// newApp wires every package for cfg.
func newApp(raw *config.Config, opts appOptions) (*app, error) {
	a := &app{opts: opts, log: opts.log, reg: newRegistry(), gates: map[string]*upstreamGate{},
		lookup: opts.lookup}
	if a.lookup == nil {
		a.lookup = (&net.Resolver{}).LookupHost
	}
	a.resolved = discovery.Resolve(context.Background(), a.lookup, discovery.Hosts(raw), nil)
	a.raw.Store(raw)
	ns, err := ownNamespace(raw, opts.namespace)
	if err != nil {
		return nil, err
	}
	a.ownNS = ns
	cfg := a.expand(raw, a.resolved, a.ownNS)
	s, err := settingsFrom(cfg)
	if err != nil {
		return nil, err
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.metrics = newAppMetrics(a.reg)
	a.conns = newClientConns(a.reg)
	if a.limiter, err = breaker.NewLimiter(s.limiter); err != nil {
		return nil, err
	}
	if a.queue, err = queue.New(s.queue); err != nil {
		return nil, err
	}
	if err := errors.Join(a.classLimit.Set(s.classes), a.modelLimit.Set(s.models)); err != nil {
		return nil, err
	}
	if a.quotas, err = quota.New(quota.Settings{Now: opts.now}); err != nil {
		return nil, err
	}
	var quotas decide.Quotas = a.quotas
	cs := control.FromPolicy(cfg)
	cs.Now = opts.now
	if a.ctl, err = control.New(cs); err != nil {
		return nil, err
	}
	a.setWindows(s.upstreams)
	var limiter decide.Limiter = a.limiter
	var classLimits decide.ClassLimiter = &a.classLimit
	var modelLimits decide.ModelLimiter = &a.modelLimit
	if cfg.Cluster != nil { // several replicas: buckets and window leases through Redis
		if a.shared, err = newShared(cfg, s.limiter, a.demand, a.reshare, a.log, a.reg, a.step); err != nil {
			return nil, err
		}
		if err := a.shared.gate.SetKeyed(s.classes, s.models); err != nil {
			return nil, err
		}
		limiter = a.shared.gate
		classLimits, modelLimits = a.shared.gate.Classes(), a.shared.gate.Models()
		a.shQuotas = a.shared.c.NewQuotas(a.quotas)
		quotas = a.shQuotas
	}
	if err := a.setQuotas(s.quotas); err != nil {
		return nil, err
	}
	a.reqMetrics = proxy.NewMetrics(a.reg)
	a.pods = pods.New(a.ctl)
	a.setPods(a.upstreams(s))
	if a.core, err = decide.New(decide.Options{Registry: a.pods, Admission: decide.Queue(a.queue), Limiter: limiter,
		ClassLimiter: classLimits, ModelLimiter: modelLimits, Quotas: quotas, Recorder: a.reqMetrics, Policy: s.policy}); err != nil {
		return nil, err
	}
	if err := a.newTracer(cfg); err != nil {
		return nil, err
	}
	po := proxy.Options{
		Core:         a.core,
		OnPodRefused: a.podRefused,
		Transport:    s.transport,
		Health:       s.health,
		RoundTripper: opts.transport,
		Metrics:      a.reqMetrics,
		Logger:       a.log,
		Version:      version,
		Ready:        a.holdsShare,
	}
	a.traceOptions(cfg, &po)
	if a.handler, err = proxy.New(po); err != nil {
		return nil, err
	}
	a.reqMetrics.DeclareDecision(decisionWindowResize)
	a.current.Store(cfg)
	if a.shared != nil { // each window at this replica's share: none until a renewal grants one
		a.shared.c.SetPods(basesOf(s.upstreams))
	}
	tok, err := loadAdminToken(cfg.Server.AdminTokenFile)
	if err != nil {
		return nil, err
	}
	a.adminToken.Store(&tok)
	if a.hooks, err = relief.New(relief.Settings{OnResult: a.hookResult}); err != nil {
		return nil, err
	}
	a.queue.SetAvailability(a.pods.Availability) // asked directly at every dispatch
	a.slow = &slowPath{a: a, ctl: a.ctl, hooks: a.hooks}
	a.pressure = pressure.NewRunner(pressure.RunnerSettings{Logger: a.log, OnUpdate: func(st pressure.State) {
		a.slow.observe(st)
		a.step("pressure")
	}})
	if err := a.newWatcher(); err != nil {
		return nil, err
	}
	a.reg.MustRegister(admin.NewStateCollector(a.snapshot), admin.NewPressureCollector(a.pressure.Snapshot))
	return a, nil
}

// setPods replaces the registry's pods and their series; it returns the
// names removed, whose windows the caller retires.
func (a *app) setPods(ps []pods.Pod) (removed []string) {
	removed = a.pods.Set(ps)
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	a.reqMetrics.UpstreamsSet(names, removed)
	return removed
}

// errDrainingQueue is what queued requests get when shutdown drains the queue.
var errDrainingQueue = fmt.Errorf("%w: shutting down", decide.ErrDraining)

// cfg returns the running policy.
func (a *app) cfg() *config.Config { return a.current.Load() }

// close releases what the app holds beyond its goroutines.
func (a *app) close() {
	if a.watcher != nil {
		_ = a.watcher.Close()
	}
	a.shutdownTracer()
}

// upstreams builds the registry's pods, reusing each pod's error breaker
// while its settings stay the same. The caller holds a.mu or is newApp.
func (a *app) upstreams(s settings) []pods.Pod {
	out := make([]pods.Pod, 0, len(s.upstreams))
	next := make(map[string]*upstreamGate, len(s.upstreams))
	for _, u := range s.upstreams {
		g, ok := a.gates[u.name]
		if !ok || !sameErrorSettings(g.s, s.errors) {
			g = &upstreamGate{s: s.errors, b: a.newErrorBreaker(u.name, s.errors)}
		}
		next[u.name] = g
		up := pods.Pod{Name: u.name, URL: u.url, Models: u.models, DiscoverModels: u.discoverModels}
		if g.b != nil {
			up.Gate = pods.Breaker(g.b)
		}
		out = append(out, up)
	}
	for name := range a.gates {
		if _, ok := next[name]; !ok { // a pod gone: its series go with it
			a.metrics.breakerTransitions.DeletePartialMatch(prometheus.Labels{"upstream": name})
		}
	}
	a.gates = next
	return out
}

// setWindows sizes each pod's batch window at its maximum.
func (a *app) setWindows(ups []upstreamSpec) {
	for _, u := range ups {
		a.updateBound(u.name, func(b *bound) { b.limit = u.maxInflight })
	}
}

// holdsShare is /readyz's cluster condition: a replica that holds no share
// of any pod's window (a new Redis's first lease time, a new replica before
// its first grant) can admit nothing, so load balancers should wait.
func (a *app) holdsShare() error {
	if a.shared == nil || a.cfg().Mode == config.ModeObserve || a.shared.c.Holding() {
		return nil
	}
	return errors.New("holding no share of any upstream's window yet (cluster: waiting for a lease)")
}

// basesOf maps each pod to its largest window: the unit of its leases.
func basesOf(ups []upstreamSpec) map[string]int {
	m := make(map[string]int, len(ups))
	for _, u := range ups {
		m[u.name] = u.maxInflight
	}
	return m
}

// step reports a lifecycle step to opts.stage.
func (a *app) step(name string) {
	if a.opts.stage != nil {
		a.opts.stage(name)
	}
}

// startLoops starts the app's background loops beyond the health check: the
// pressure monitor and the relief hook runner. They stop when ctx ends.
func (a *app) startLoops(ctx context.Context, wg *sync.WaitGroup) error {
	a.loopsCtx.Store(&ctx)
	wg.Go(func() { _ = a.hooks.Run(ctx) })
	wg.Go(func() { a.discover(ctx) })
	if err := a.watchPools(ctx); err != nil {
		return err
	}
	wg.Go(func() {
		<-ctx.Done()
		a.stopPools()
	})
	if a.shared != nil {
		wg.Go(func() { a.shared.run(ctx) })
	}
	if err := a.pressure.Apply(ctx, a.pressureSettings(a.cfg())); err != nil {
		return err
	}
	wg.Go(func() {
		<-ctx.Done()
		a.pressure.Stop()
	})
	return nil
}

// hookResult logs and counts one relief hook call.
func (a *app) hookResult(r relief.Result) {
	a.metrics.hookCalls.WithLabelValues(r.Level, r.Outcome()).Inc()
	level := slog.LevelInfo
	attrs := []slog.Attr{slog.String("upstream", r.Upstream), slog.String("state", r.Level),
		slog.String("url", r.URL), slog.Int("status", r.Status), slog.Float64("duration_s", r.Duration.Seconds())}
	if r.Err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("err", r.Err.Error()))
	}
	a.log.LogAttrs(context.Background(), level, "relief hook called", attrs...)
	a.step("hook")
}
