package main

import (
	"net/http"
	"net/http/pprof"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gatekeeper-dev/gatekeeper/internal/admin"
)

// adminHandler serves the admin listener: /metrics, /admin/state, /admin/scale, the status
// page under /admin/ and, while the policy's server.pprof is on, Go's
// profiler under /debug/pprof/. They are never served on the traffic port.
func (a *app) adminHandler() http.Handler {
	r := chi.NewRouter()
	r.Use(admin.RequireToken(a.policy.Token)) // every admin route, when server.admin_token_file is set
	r.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{
		ErrorLog: nil, ErrorHandling: promhttp.ContinueOnError, EnableOpenMetrics: true, // exemplars (trace ids) go out only in OpenMetrics
	}))
	r.Method(http.MethodGet, "/admin/state", admin.StateHandler(a.snapshot))
	r.Method(http.MethodGet, "/admin/scale", admin.ScaleHandler(a.scalePools()))
	r.Mount("/admin", admin.StatusPage())
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

// snapshot assembles the /admin/state document from the running app.
func (a *app) snapshot() admin.State {
	src := admin.Sources{
		Version: version, Config: a.cfg, Ready: a.ready, Draining: a.core.Draining,
		Queue: a.queue.Stats, Upstreams: a.pods.Statuses, Breaker: a.pods.BreakerState,
		Slow: a.ctl.State, LevelChanges: a.ctl.Changes, Ceiling: a.ctl.Ceiling, Pressure: a.pressure.Snapshot, Scorer: a.router.PodState,
	}
	if a.shared != nil {
		src.Cluster = func() any { return a.shared.Cluster().Snapshot() }
	}
	src.Quotas = func() any { return a.quotas.Snapshot() }
	return admin.Snapshot(src)
}

// ready is the admin listener's readiness: the core's, for either front.
func (a *app) ready() bool { return a.core.Unready() == "" }
