package main

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gatekeeper-dev/gatekeeper/control"
	"github.com/gatekeeper-dev/gatekeeper/pressure"
	"github.com/gatekeeper-dev/gatekeeper/proxy"
	"github.com/gatekeeper-dev/gatekeeper/queue"
)

// proxyRoundTripper is the upstream transport a test may inject.
type proxyRoundTripper = http.RoundTripper

// adminHandler serves the admin listener: /metrics, /admin/state and, while
// the policy's server.pprof is on, Go's profiler under /debug/pprof/. They
// are never served on the traffic port.
func (a *app) adminHandler() http.Handler {
	r := chi.NewRouter()
	r.Use(a.adminAuth) // every admin route, when server.admin_token_file is set
	r.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{
		ErrorLog: nil, ErrorHandling: promhttp.ContinueOnError, EnableOpenMetrics: false,
	}))
	r.Get("/admin/state", a.serveState)
	r.Mount("/admin", a.statusPage())
	r.Route("/debug/pprof", func(r chi.Router) {
		r.Use(a.pprofEnabled)
		r.HandleFunc("/cmdline", pprof.Cmdline)
		r.HandleFunc("/profile", pprof.Profile)
		r.HandleFunc("/symbol", pprof.Symbol)
		r.HandleFunc("/trace", pprof.Trace)
		r.HandleFunc("/*", pprof.Index) // the index and the named profiles (heap, goroutine, ...)
	})
	return r
}

// pprofEnabled answers 404 unless the current policy turns server.pprof on;
// it is read per request, so a reload switches the profiler at once.
func (a *app) pprofEnabled(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.cfg().Server.Pprof {
			http.NotFound(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// state is the /admin/state document.
type state struct {
	Version   string                 `json:"version"`
	Mode      string                 `json:"mode"`
	Ready     bool                   `json:"ready"`
	Draining  bool                   `json:"draining"`
	Time      time.Time              `json:"time"`
	Upstreams []upstreamState        `json:"upstreams"`
	Queue     queueState             `json:"queue"`
	Limits    map[string]float64     `json:"limits"`
	Sources   []pressure.SourceState `json:"sources"`
}

type upstreamState struct {
	proxy.UpstreamStatus
	Breaker     string `json:"breaker"`
	WindowLimit int    `json:"window_limit"`
	InFlight    int    `json:"inflight"`
	MaxInflight int    `json:"max_inflight"`
	MinInflight int    `json:"min_inflight"`
	Level       string `json:"level"`
	Phase       string `json:"phase"`
	// LastChange is the latest level change and the signal that caused it.
	LastChange *control.Cause `json:"last_change,omitempty"`
	// Signals are the pressure readings (worst over the pod's GPUs), each
	// with its source and age; Absent lists the signals no source provides.
	Signals map[pressure.Signal]pressure.Value `json:"signals"`
	Absent  []pressure.Signal                  `json:"absent"`
	GPUs    []pressure.GPUState                `json:"gpus,omitempty"`
	Rules   map[string]ruleState               `json:"rules"`
}

// ruleState shows a rule's thresholds next to the signal they judge.
type ruleState struct {
	Degrade *float64 `json:"degrade,omitempty"`
	Shed    *float64 `json:"shed,omitempty"`
}

type queueState struct {
	Length int    `json:"length"`
	Tokens int64  `json:"tokens"`
	Order  string `json:"order"`
}

// snapshot assembles the state document from every package's snapshot.
func (a *app) snapshot() state {
	cfg := a.cfg()
	qs := a.queue.Stats()
	windows := make(map[string]queue.WindowStats, len(qs.Windows))
	for _, w := range qs.Windows {
		windows[w.Name] = w
	}
	bounds := map[string][2]int{}
	for _, u := range cfg.Upstreams {
		bounds[u.Name] = [2]int{u.MinInflight, u.MaxInflight}
	}
	s := state{
		Version: version, Mode: string(cfg.Mode), Ready: a.handler.Ready(), Draining: a.handler.Draining(),
		Time:   time.Now().UTC(),
		Queue:  queueState{Length: qs.Length, Tokens: qs.Tokens, Order: qs.Order.String()},
		Limits: map[string]float64{"qps": cfg.FastBreaker.QPS, "burst": float64(cfg.FastBreaker.Burst)},
	}
	ps := a.pressure.snapshot()
	s.Sources = ps.Sources
	rules := map[string]ruleState{}
	for sig, r := range cfg.Pressure.Rules {
		rules[string(sig)] = ruleState{Degrade: r.Degrade, Shed: r.Shed}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, u := range a.handler.Upstreams() {
		w := windows[u.Name]
		us := upstreamState{UpstreamStatus: u, WindowLimit: w.Limit, InFlight: w.InFlight,
			MinInflight: bounds[u.Name][0], MaxInflight: bounds[u.Name][1], Breaker: "none"}
		if g, ok := a.gates[u.Name]; ok && g.b != nil {
			us.Breaker = g.b.State().String()
		}
		if st, cause, ok := a.ctl.State(u.Name); ok {
			us.Level, us.Phase, us.LastChange = st.Level.String(), st.Phase.String(), cause
		}
		if p, ok := ps.Upstream(u.Name); ok {
			us.Signals, us.Absent, us.GPUs = p.Signals, p.Absent, p.GPUs
		}
		us.Rules = rules
		s.Upstreams = append(s.Upstreams, us)
	}
	return s
}

func (a *app) serveState(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(a.snapshot())
}

// stateCollector exports the queue, windows and error breakers at scrape time.
type stateCollector struct {
	a                                  *app
	queueLen, queueTokens, limit, infl *prometheus.Desc
	breakerState, available, level     *prometheus.Desc
}

func newStateCollector(a *app) *stateCollector {
	up := []string{"upstream"}
	return &stateCollector{a: a,
		queueLen:     prometheus.NewDesc("gatekeeper_queue_length", "Requests waiting for a window slot.", nil, nil),
		queueTokens:  prometheus.NewDesc("gatekeeper_queue_tokens", "Estimated tokens of the waiting requests.", nil, nil),
		limit:        prometheus.NewDesc("gatekeeper_window_limit", "The most requests the upstream may run at once (its batch window).", up, nil),
		infl:         prometheus.NewDesc("gatekeeper_inflight", "Requests running on the upstream now.", up, nil),
		breakerState: prometheus.NewDesc("gatekeeper_error_breaker_state", "Error breaker state: 0 closed, 1 half-open, 2 open.", up, nil),
		available:    prometheus.NewDesc("gatekeeper_upstream_available", "1 while the upstream may receive new dispatches.", up, nil),
		level:        prometheus.NewDesc("gatekeeper_pressure_level", "Pressure level: 0 normal, 1 degraded, 2 critical.", up, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.queueLen, c.queueTokens, c.limit, c.infl, c.breakerState, c.available, c.level} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.a.snapshot()
	ch <- prometheus.MustNewConstMetric(c.queueLen, prometheus.GaugeValue, float64(s.Queue.Length))
	ch <- prometheus.MustNewConstMetric(c.queueTokens, prometheus.GaugeValue, float64(s.Queue.Tokens))
	for _, u := range s.Upstreams {
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(u.WindowLimit), u.Name)
		ch <- prometheus.MustNewConstMetric(c.infl, prometheus.GaugeValue, float64(u.InFlight), u.Name)
		ch <- prometheus.MustNewConstMetric(c.breakerState, prometheus.GaugeValue, breakerValue(u.Breaker), u.Name)
		ch <- prometheus.MustNewConstMetric(c.available, prometheus.GaugeValue, boolValue(u.Available), u.Name)
		ch <- prometheus.MustNewConstMetric(c.level, prometheus.GaugeValue, levelValue(u.Level), u.Name)
	}
}

func breakerValue(s string) float64 {
	switch s {
	case "half-open":
		return 1
	case "open":
		return 2
	}
	return 0
}

func levelValue(s string) float64 {
	switch s {
	case "degraded":
		return 1
	case "critical":
		return 2
	}
	return 0
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
