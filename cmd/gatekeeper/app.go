package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/gatekeeper-dev/gatekeeper/internal/admin"
	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/cluster"
	"github.com/gatekeeper-dev/gatekeeper/internal/cluster/sharing"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/discovery"
	"github.com/gatekeeper-dev/gatekeeper/internal/listener"
	"github.com/gatekeeper-dev/gatekeeper/internal/overload"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods/healthcheck"
	"github.com/gatekeeper-dev/gatekeeper/internal/policy"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/proxy"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/quota"
	"github.com/gatekeeper-dev/gatekeeper/internal/route"
	"github.com/gatekeeper-dev/gatekeeper/internal/scale"
	"github.com/gatekeeper-dev/gatekeeper/internal/slowpath"
	"github.com/gatekeeper-dev/gatekeeper/internal/telemetry"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

var (
	_ decide.Limiter      = (*cluster.Gate)(nil)
	_ decide.ClassLimiter = (*cluster.Keyed)(nil)
	_ decide.ModelLimiter = (*cluster.Keyed)(nil)
)

// appOptions are the process-level inputs of an app.
type appOptions struct {
	log   *slog.Logger
	level *slog.LevelVar // nil: the log level is not reloadable
	path  string         // policy file; "" for the embedded default
	// transport, if set, replaces the upstream transport (tests).
	transport http.RoundTripper
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

// app is one running gatekeeper: the packages wired together, and the policy
// that a reload swaps (package policy). Safe for concurrent use; must not be
// copied.
type app struct {
	opts     appOptions
	log      *slog.Logger
	reg      *registry
	metrics  *appMetrics
	policy   *policy.Keeper
	shared   *sharing.Sharing // nil without a cluster section
	packages                  // what newApp built
	// pickerHealthAddr is the endpoint picker's plaintext health address
	// once it listens (tests dial it).
	pickerHealthAddr atomic.Value
}

// packages are the packages newApp builds and hands to one another.
type packages struct {
	queue      *queue.Queue
	ctl        *control.Controller
	pods       *pods.Registry   // the decision core's pods
	core       *decide.Core     // what both fronts ask
	handler    *proxy.Handler   // the HTTP front; nil in endpoint-picker mode
	reqMetrics *proxy.Metrics   // the request metrics both fronts record
	windows    *cluster.Windows // each pod's window and budgets, at this replica's share
	quotas     *quota.Quotas    // this replica's token quotas (its share in cluster mode)
	tracer     *telemetry.Provider
	pressure   *pressure.Runner
	slow       *slowpath.Path
	conns      *listener.Conns      // the traffic listener's open connections
	health     *healthcheck.Checker // the pods' active health check
	scaler     *scale.Scaler        // the scaling signal; nil without a scaling section
	router     *route.Router        // the pod scorer, the queue's while scoring runs (policy)
}

// newApp wires every package for raw: the policy's first Plan, the
// packages built from it, then the Plan applied to them.
func newApp(raw *config.Config, opts appOptions) (*app, error) {
	a := &app{opts: opts, log: opts.log, reg: newRegistry()}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	a.pressure = pressure.NewRunner(pressure.RunnerSettings{Logger: a.log, OnUpdate: func(st pressure.State) {
		a.slow.Observe(st)
		a.step("pressure")
	}})
	a.policy = policy.New(policy.Options{Path: opts.path, NVML: pressure.NVMLCompiled, Log: a.log, Level: opts.level,
		Lookup: opts.lookup, Namespace: opts.namespace, Sources: opts.sources, Pressure: a.pressure, Registerer: a.reg,
		NewPoolWatcher: a.newPoolWatcher, Step: a.step})
	first, err := a.policy.Prepare(raw, a.policy.Resolve(context.Background(), raw))
	if err != nil {
		return nil, err
	}
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.metrics = newAppMetrics(a.reg)
	a.conns = listener.NewConns(a.reg)
	t, err := a.build(first)
	if err != nil {
		return nil, err
	}
	a.policy.Bind(t)
	first.Apply()
	if a.shared != nil { // each window at this replica's share: none until a renewal grants one
		a.windows.ShareWith(a.shared.Cluster())
	}
	if a.slow, err = slowpath.New(slowpath.Settings{Controller: a.ctl, Queue: a.queue, Windows: a.windows, Refresh: a.pods.Refresh, Config: a.cfg,
		Decided: a.reqMetrics.Decided, Log: a.log, Registerer: a.reg, Step: a.step, Router: a.router}); err != nil {
		return nil, err
	}
	a.queue.SetAvailability(a.pods.Published) // a snapshot: no lock under the queue's
	if err := a.policy.WatchFile(); err != nil {
		return nil, err
	}
	a.reg.MustRegister(admin.NewStateCollector(a.snapshot), admin.NewPressureCollector(a.pressure.Snapshot))
	return a, nil
}

// build makes the packages for the first Plan and returns what the policy
// changes in them.
func (a *app) build(first *policy.Plan) (policy.Targets, error) {
	cfg, s := first.Config(), first.Settings()
	t := policy.Targets{Classes: &breaker.LimiterSet{}, Models: &breaker.LimiterSet{}, SetPods: a.setPolicyPods}
	var err error
	if t.Limiter, err = breaker.NewLimiter(s.Limiter); err != nil {
		return t, err
	}
	if a.queue, err = queue.New(s.Queue); err != nil {
		return t, err
	}
	if a.router, err = first.NewRouter(); err != nil {
		return t, err
	}
	if a.quotas, err = quota.New(quota.Settings{Now: a.opts.now}); err != nil {
		return t, err
	}
	cs := first.Control()
	cs.Now = a.opts.now
	if a.ctl, err = control.New(cs); err != nil {
		return t, err
	}
	a.windows = cluster.NewWindows(cluster.WindowsSettings{Queue: a.queue, Load: a.load,
		Scaled: func() bool { return a.cfg().Mode != config.ModeObserve }})
	t.Queue, t.Controller, t.Windows, t.Quotas, t.Router = a.queue, a.ctl, a.windows, a.quotas, a.router
	o := decide.Options{Admission: decide.Queue(a.queue), Limiter: t.Limiter, ClassLimiter: t.Classes, ModelLimiter: t.Models,
		Quotas: a.quotas, Policy: s.Policy}
	if cfg.Cluster != nil { // several replicas: buckets and window leases through Redis
		if a.shared, err = sharing.New(sharing.Settings{Cluster: policy.ClusterSettings(cfg.Cluster), Limits: s.Limiter,
			Windows: a.windows, Log: a.log, Registerer: a.reg, Step: a.step}); err != nil {
			return t, err
		}
		g, sq := a.shared.Gate(), a.shared.Cluster().NewQuotas(a.quotas)
		t.Gate, t.Shares, t.Quotas = g, a.shared.Cluster(), sq
		o.Limiter, o.ClassLimiter, o.ModelLimiter, o.Quotas = g, g.Classes(), g.Models(), sq
	}
	a.reqMetrics = proxy.NewMetrics(a.reg)
	a.pods = pods.NewWith(pods.Options{Levels: a.ctl, BreakerChanged: a.breakerChanged, BreakerInvalid: a.breakerInvalid})
	o.Registry, o.Recorder, o.OnPodRefused, o.Ready = a.pods, a.reqMetrics, a.podRefused, a.holdsShare
	if o.Pools, err = a.newScaler(cfg); err != nil {
		return t, err
	}
	if a.core, err = decide.New(o); err != nil {
		return t, err
	}
	t.Core = a.core
	return t, a.newFronts(cfg, s)
}

// newFronts builds what both fronts share (the tracer, the pods' health
// check) and, unless the endpoint picker replaces it (runPicker builds
// that), the HTTP front. Readiness and the drain are the core's, so the
// picker needs no HTTP front.
func (a *app) newFronts(cfg *config.Config, s policy.Settings) error {
	if err := a.newTracer(cfg); err != nil {
		return err
	}
	rt := a.opts.transport
	if rt == nil {
		rt = proxy.NewTransport(s.Transport)
	}
	a.health = &healthcheck.Checker{Registry: a.pods, Settings: s.Health, Transport: rt,
		Observed: a.reqMetrics.Health, Dispatch: a.core.Dispatch, Recovered: a.router.Forget, Logger: a.log}
	a.reqMetrics.DeclareDecision(slowpath.DecisionWindowResize)
	if cfg.EndpointPicker != nil {
		return nil
	}
	ov, err := overload.New(overload.Settings{SchedDelay: cfg.Server.Overload.SchedDelay, MaxInflight: cfg.Server.Overload.MaxInflight})
	if err != nil {
		return err
	}
	po := proxy.Options{Core: a.core, RoundTripper: rt, Metrics: a.reqMetrics, Logger: a.log, Version: version, Overload: ov,
		StreamHandoff: cfg.Server.StreamHandoff, HandedOffClosed: a.conns.HandedOffClosed}
	a.traceOptions(cfg, &po)
	a.handler, err = proxy.New(po)
	return err
}

// setPolicyPods is the policy's SetPods: the registry's pods, each with its
// error breaker.
func (a *app) setPolicyPods(s policy.Settings) []string {
	return a.setPods(upstreams(s))
}

// setPods replaces the registry's pods and their series; it returns the
// names removed, whose windows the caller retires.
func (a *app) setPods(ps []pods.Pod) (removed []string) {
	removed = a.pods.Set(ps)
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
		for _, st := range []breaker.State{breaker.Closed, breaker.HalfOpen, breaker.Open} {
			a.metrics.breakerTransitions.WithLabelValues(p.Name, st.String()) // at 0 from the start
		}
	}
	for _, name := range removed { // a pod gone: its series go with it
		a.metrics.breakerTransitions.DeletePartialMatch(prometheus.Labels{"upstream": name})
	}
	a.reqMetrics.UpstreamsSet(names, removed)
	return removed
}

// load is what the queue runs and holds, for the cluster's demand.
func (a *app) load() cluster.Load {
	st := a.queue.Stats()
	l := cluster.Load{Waiting: st.Length, InFlight: make(map[string]int, len(st.Windows))}
	for _, w := range st.Windows {
		l.InFlight[w.Name] = w.InFlight
	}
	return l
}

// errDrainingQueue is what queued requests get when shutdown drains the queue.
var errDrainingQueue = fmt.Errorf("%w: shutting down", decide.ErrDraining)

// cfg returns the running policy.
func (a *app) cfg() *config.Config { return a.policy.Config() }

// close releases what the app holds beyond its goroutines.
func (a *app) close() {
	a.policy.Close()
	a.shutdownTracer()
}

// upstreams is the registry's pods for s; the registry builds each pod's
// error breaker from s.Errors (and keeps it while they stay the same).
func upstreams(s policy.Settings) []pods.Pod {
	out := make([]pods.Pod, 0, len(s.Upstreams))
	for _, u := range s.Upstreams {
		errs := s.Errors
		out = append(out, pods.Pod{Name: u.Name, URL: u.URL, Errors: &errs, Models: u.Models, DiscoverModels: u.DiscoverModels})
	}
	return out
}

// breakerChanged is the registry's BreakerChanged: an error breaker's
// transition reaches the log and the metrics, and one that opens, the
// controller (the pod's availability is already republished).
func (a *app) breakerChanged(name string, from, to breaker.State) {
	a.metrics.breakerTransitions.WithLabelValues(name, to.String()).Inc()
	a.log.LogAttrs(context.Background(), slog.LevelWarn, "error breaker changed",
		slog.String("upstream", name), slog.String("state", to.String()), slog.String("from", from.String()))
	if to == breaker.Open {
		a.podFailed(name)
	}
}

// breakerInvalid is the registry's BreakerInvalid. The settings were
// validated by config, so this does not happen; if it does, the pod runs
// without an error breaker and the log says so.
func (a *app) breakerInvalid(name string, err error) {
	a.log.LogAttrs(context.Background(), slog.LevelError, "error breaker disabled",
		slog.String("upstream", name), slog.String("err", err.Error()))
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

// holdsShare is readiness's cluster condition (sharing.Ready), the core's
// Options.Ready.
func (a *app) holdsShare() error {
	if a.shared == nil {
		return nil
	}
	return a.shared.Ready(a.cfg().Mode == config.ModeObserve)
}

// step reports a lifecycle step to opts.stage.
func (a *app) step(name string) {
	if a.opts.stage != nil {
		a.opts.stage(name)
	}
}

// startLoops starts the app's background loops beyond the health check:
// the relief hooks, DNS discovery, the InferencePool watch, the cluster's
// heartbeat, the scaling signal and the pressure monitor. They stop when
// ctx ends, and wg waits for them.
func (a *app) startLoops(ctx context.Context, wg *sync.WaitGroup) error {
	wg.Go(func() { _ = a.slow.Run(ctx) })
	wg.Go(func() { a.policy.Discover(ctx) })
	if err := a.policy.WatchPools(ctx); err != nil {
		return err
	}
	wg.Go(func() {
		<-ctx.Done()
		a.policy.StopPools()
	})
	if a.shared != nil {
		wg.Go(func() { a.shared.Run(ctx) })
	}
	if a.scaler != nil {
		wg.Go(func() { _ = a.scaler.Run(ctx, scale.GatherPools(a.reg, a.scaler.Tally(), a.pods.ModelPods)) })
	}
	a.pressure.Start(ctx)
	wg.Go(func() {
		<-ctx.Done()
		a.pressure.Stop()
	})
	return nil
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
