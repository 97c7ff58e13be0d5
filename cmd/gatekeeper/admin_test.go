package main

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/scale"
)

// TestAdminPprofSwitch checks that the profiler is served on the admin
// listener only while server.pprof is on, and that a new policy switches it
// without rebuilding the handler (as a reload does).
func TestAdminPprofSwitch(t *testing.T) {
	cfg, err := config.Parse([]byte("upstreams: [{name: pod, url: 'http://127.0.0.1:1'}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := newApp(cfg, appOptions{transport: newFakePod()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.close)
	admin := a.adminHandler()
	on := *cfg
	on.Server.Pprof = true
	tests := []struct {
		name     string
		cfg      *config.Config
		path     string
		want     int
		wantBody string
	}{
		{"off index", cfg, "/debug/pprof/", http.StatusNotFound, ""},
		{"off heap", cfg, "/debug/pprof/heap", http.StatusNotFound, ""},
		{"off cmdline", cfg, "/debug/pprof/cmdline", http.StatusNotFound, ""},
		{"on index", &on, "/debug/pprof/", http.StatusOK, "goroutine"},
		{"on heap", &on, "/debug/pprof/heap?debug=1", http.StatusOK, "heap profile"},
		{"on cmdline", &on, "/debug/pprof/cmdline", http.StatusOK, ""},
		{"on metrics still served", &on, "/metrics", http.StatusOK, "go_goroutines"},
		{"on state still served", &on, "/admin/state", http.StatusOK, `"upstreams"`},
		{"on status page still served", &on, "/admin/", http.StatusOK, `src="app.js"`},
		{"off again", cfg, "/debug/pprof/", http.StatusNotFound, ""},
	}
	for _, tt := range tests { // sequential: each row sets the running policy
		t.Run(tt.name, func(t *testing.T) {
			if err := a.policy.Set(tt.cfg); err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			admin.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
			if rec.Code != tt.want || !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Errorf("GET %s = %d %.80q, want %d with %q", tt.path, rec.Code, rec.Body.String(), tt.want, tt.wantBody)
			}
		})
	}
	// The traffic handler never serves the profiler.
	if err := a.policy.Set(&on); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	a.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/", nil))
	if rec.Code == http.StatusOK {
		t.Errorf("traffic GET /debug/pprof/ = %d, want a refusal", rec.Code)
	}
}

// TestAdminScale: GET /admin/scale answers the scaler's estimates while the
// policy has a scaling section, 404 without one; the gauge follows. With
// routing by model each model is a pool too, with the pods that serve it.
func TestAdminScale(t *testing.T) {
	const onePod = "upstreams: [{name: pod, url: 'http://127.0.0.1:1'}]\n"
	for _, tt := range []struct {
		name, policy string
		want         int
		body         []string
	}{
		{"off", onePod, http.StatusNotFound, []string{`scaling is off`}},
		{"on", onePod + "scaling: {min_replicas: 2, max_replicas: 4}\n", http.StatusOK,
			[]string{`"pool": "all"`, `"desired": 2`, `"current": 1`, `"hold": "no_data"`}},
		{"on, by model", "upstreams: [{name: pod, url: 'http://127.0.0.1:1', models: [llama, qwen]}, " +
			"{name: pod2, url: 'http://127.0.0.1:2', models: [qwen]}]\nscaling: {min_replicas: 2, max_replicas: 4}\n", http.StatusOK,
			[]string{`"pool": "all"`, `"pool": "llama"`, `"pool": "qwen"`, `"current": 1`, `"current": 2`, `"hold": "no_data"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(tt.policy))
			if err != nil {
				t.Fatal(err)
			}
			a, err := newApp(cfg, appOptions{transport: newFakePod()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(a.close)
			if a.scaler != nil {
				a.scaler.Observe(scale.GatherPools(a.reg, a.scaler.Tally(), a.pods.ModelPods)()) // what Run does first
			}
			rec := httptest.NewRecorder()
			a.adminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/admin/scale", nil))
			for _, want := range tt.body {
				if rec.Code != tt.want || !strings.Contains(rec.Body.String(), want) {
					t.Errorf("GET /admin/scale = %d %s, want %d with %q", rec.Code, rec.Body, tt.want, want)
				}
			}
			if a.scaler != nil { // every pool: 2, its min_replicas
				c := collectorNamed(t, a, "gatekeeper_desired_replicas")
				if n := testutil.CollectAndCount(c); n != strings.Count(strings.Join(tt.body, " "), `"pool"`) {
					t.Errorf("gatekeeper_desired_replicas has %d series, want one per pool of %v", n, tt.body)
				}
				ch := make(chan prometheus.Metric, 8)
				c.Collect(ch)
				close(ch)
				for m := range ch {
					var d dto.Metric
					if err := m.Write(&d); err != nil || d.GetGauge().GetValue() != 2 {
						t.Errorf("gatekeeper_desired_replicas %v = %v (%v), want 2", d.GetLabel(), d.GetGauge().GetValue(), err)
					}
				}
			}
		})
	}
}

// collectorNamed is the registered collector that describes name.
func collectorNamed(t *testing.T, a *app, name string) prometheus.Collector {
	t.Helper()
	for _, c := range a.reg.registered() {
		for _, d := range describe(t, c) {
			if d.name == name {
				return c
			}
		}
	}
	t.Fatalf("no collector describes %s", name)
	return nil
}

// TestScaleCountsByModel: the core counts each request in its model's pool
// (decide.Options.Pools is the scaler's tally), so a model's arrivals reach
// its pool's inputs and not another model's.
func TestScaleCountsByModel(t *testing.T) {
	cfg, err := config.Parse([]byte("upstreams: [{name: a, url: 'http://127.0.0.1:1', models: [llama]}, " +
		"{name: b, url: 'http://127.0.0.1:2', models: [qwen]}]\nscaling: {interval: 10s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	clock, pod := newFrozenClock(), newFakePod()
	close(pod.release) // the pod answers at once
	a, err := newApp(cfg, appOptions{transport: pod, now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.close)
	read := scale.GatherPools(a.reg, a.scaler.Tally(), a.pods.ModelPods)
	a.scaler.Observe(read()) // the first sample names the models counted
	for range 3 {
		rec := httptest.NewRecorder()
		a.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions",
			strings.NewReader(`{"model":"llama","messages":[{"role":"user","content":"hi"}]}`)))
		if rec.Code != http.StatusOK {
			t.Fatalf("POST = %d %s, want 200", rec.Code, rec.Body)
		}
	}
	clock.advance(10 * time.Second)
	a.scaler.Observe(read())
	got := map[string]float64{}
	for _, p := range a.scaler.Snapshot() {
		got[p.Pool] = p.Inputs.Arrivals
	}
	if want := map[string]float64{"all": 0.3, "llama": 0.3, "qwen": 0}; !maps.Equal(got, want) {
		t.Errorf("arrivals per second by pool = %v, want %v", got, want)
	}
}
