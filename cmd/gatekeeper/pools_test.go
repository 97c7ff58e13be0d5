package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// modelPod is a pod on loopback that serves the given models: it records
// the model of each completion it gets and lists them at /v1/models.
type modelPod struct {
	url string
	// mu guards got.
	mu  sync.Mutex
	got []string
}

func newModelPod(t *testing.T, models ...string) *modelPod {
	p := &modelPod{}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, _ *http.Request) {
		var data []string
		for _, m := range models {
			data = append(data, fmt.Sprintf(`{"id":%q,"object":"model","owned_by":"vllm","max_model_len":8192}`, m))
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[`+strings.Join(data, ",")+`]}`)
	})
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Model string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		p.mu.Lock()
		p.got = append(p.got, body.Model)
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{}`)
	})
	p.url = newPodServer(t, mux)
	return p
}

func (p *modelPod) models() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.got)
}

func sendModel(t *testing.T, a *app, model string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	a.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions",
		strings.NewReader(`{"model":"`+model+`","prompt":"x","max_tokens":4}`)))
	return rec
}

// TestModelPools: two pools serving different models never receive each
// other's requests (one pool listed in the policy, the other discovered
// from the pod's own /v1/models); an unknown model is 404 model_not_found
// without reaching a pod; GET /v1/models answers the union; a model's own
// limit answers 429.
func TestModelPools(t *testing.T) {
	small, big := newModelPod(t, "small-model"), newModelPod(t, "big-model")
	a, err := newApp(mustParse(t, `
upstreams:
  - {name: small, url: "`+small.url+`", models: [small-model]}
  - {name: big, url: "`+big.url+`", discover_models: true}
fast_breaker: {qps: 0}
health_check: {interval: 1h}
model_limits: {big-model: {qps: 0.001, burst: 3}}
`), appOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.health.CheckAll(t.Context()) // a health round: it discovers big's models

	for range 3 {
		if rec := sendModel(t, a, "small-model"); rec.Code != 200 {
			t.Fatalf("small-model = %d %s", rec.Code, rec.Body.String())
		}
		if rec := sendModel(t, a, "big-model"); rec.Code != 200 {
			t.Fatalf("big-model = %d %s", rec.Code, rec.Body.String())
		}
	}
	if got := small.models(); len(got) != 3 || slices.Contains(got, "big-model") {
		t.Errorf("small pod got %v, want only small-model ×3", got)
	}
	if got := big.models(); len(got) != 3 || slices.Contains(got, "small-model") {
		t.Errorf("big pod got %v, want only big-model ×3", got)
	}
	if rec := sendModel(t, a, "big-model"); rec.Code != 429 || rec.Header().Get("Retry-After") == "" {
		t.Errorf("4th big-model = %d, want 429 from its own limit (burst 3)", rec.Code)
	}
	rec := sendModel(t, a, "no-such-model")
	var body struct {
		Error struct{ Code, Type, Param string }
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	if rec.Code != 404 || body.Error.Code != "model_not_found" || body.Error.Type != "invalid_request_error" ||
		len(small.models())+len(big.models()) != 6 {
		t.Errorf("unknown model = %d %s, want 404 model_not_found and no pod reached", rec.Code, rec.Body.String())
	}
	list := httptest.NewRecorder()
	a.handler.ServeHTTP(list, httptest.NewRequest(http.MethodGet, "/v1/models", nil))
	var models struct {
		Object string
		Data   []map[string]any
	}
	if err := json.Unmarshal(list.Body.Bytes(), &models); err != nil || list.Code != 200 || models.Object != "list" || len(models.Data) != 2 {
		t.Fatalf("GET /v1/models = %d %s, want the union of both pools", list.Code, list.Body.String())
	}
	byID := map[any]map[string]any{}
	for _, m := range models.Data {
		byID[m["id"]] = m
	}
	if e := byID["big-model"]; e == nil || e["max_model_len"] != float64(8192) {
		t.Errorf("discovered entry = %v, want the pod's own object", e)
	}
	if e := byID["small-model"]; e == nil || e["object"] != "model" {
		t.Errorf("listed entry = %v, want an OpenAI model object", e)
	}
}

// hostRouter sends each request to the fake pod of its host.
type hostRouter map[string]*fakePod

func (h hostRouter) RoundTrip(r *http.Request) (*http.Response, error) {
	return h[r.URL.Host].RoundTrip(r)
}

// TestQueueOrderPerPool: one pool's pressure orders only its own queue:
// its waiters go shortest first while the other pool's keep arrival order.
func TestQueueOrderPerPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		podA, podB := newFakePod(), newFakePod()
		a, err := newApp(mustParse(t, `
upstreams:
  - {name: a, url: "http://a.invalid:8000", models: [ma], max_inflight: 1, min_inflight: 1}
  - {name: b, url: "http://b.invalid:8000", models: [mb], max_inflight: 1, min_inflight: 1}
fast_breaker: {qps: 0}
health_check: {interval: 1h, timeout: 1s}
queue: {max_wait: 5m, starvation_after: 1m, ttft_deadline: 0s}
pressure: {rules: {fragmentation: {degrade: 1.2, shed: 1.5}}}  # no for: one round moves a level
`), appOptions{transport: hostRouter{"a.invalid:8000": podA, "b.invalid:8000": podB}})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		send := func(model, prompt string) {
			wg.Go(func() {
				rec := httptest.NewRecorder()
				a.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions",
					strings.NewReader(`{"model":"`+model+`","prompt":"`+prompt+`","max_tokens":4}`)))
			})
			synctest.Wait()
		}
		long := strings.Repeat("long ", 400)
		for _, m := range []string{"ma", "mb"} {
			send(m, "first")
			send(m, long)
			send(m, "short")
		}
		// Pool a degrades (its window cannot shrink below 1); b stays normal.
		a.slow.Observe(pressure.State{Upstreams: []pressure.UpstreamState{{Name: "a",
			Signals: map[pressure.Signal]pressure.Value{pressure.Fragmentation: {Value: 1.3}}}}})
		for range 3 {
			podA.release <- struct{}{}
			podB.release <- struct{}{}
			synctest.Wait()
		}
		wg.Wait()
		_, _, gotA := podA.stats()
		_, _, gotB := podB.stats()
		short := func(s []string) string {
			out := make([]string, len(s))
			for i, p := range s {
				out[i] = p
				if len(p) > 10 {
					out[i] = "long"
				}
			}
			return strings.Join(out, ",")
		}
		if got := short(gotA); got != "first,short,long" {
			t.Errorf("pool a (degraded) served %s, want first,short,long", got)
		}
		if got := short(gotB); got != "first,long,short" {
			t.Errorf("pool b (normal) served %s, want first,long,short", got)
		}
	})
}

// sendNoModel posts a completion that names no model.
func sendNoModel(t *testing.T, a *app) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	a.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions",
		strings.NewReader(`{"prompt":"x","max_tokens":4}`)))
	return rec
}

// TestDiscoveredModelsAreUnknownUntilTheyAnswer (issue 24): a pod that
// discovers its models takes no model-routed request before its list
// answers, and /readyz says so: a request for a model only it may serve
// gets 503 no_upstream, not a pod that does not serve it; once it answers,
// routing follows its list.
func TestDiscoveredModelsAreUnknownUntilTheyAnswer(t *testing.T) {
	small, big := newModelPod(t, "small-model"), newModelPod(t, "big-model")
	a, err := newApp(mustParse(t, `
upstreams:
  - {name: small, url: "`+small.url+`", discover_models: true}
  - {name: big, url: "`+big.url+`", discover_models: true}
fast_breaker: {qps: 0}
health_check: {interval: 1h}
`), appOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := httptest.NewRecorder()
	a.handler.ServeHTTP(ready, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if ready.Code != 503 || !strings.Contains(ready.Body.String(), "model list") {
		t.Errorf("/readyz before any model list = %d %q, want 503 saying the model lists are unknown", ready.Code, ready.Body.String())
	}
	if rec := sendModel(t, a, "big-model"); rec.Code != 503 || rec.Header().Get("X-Gatekeeper-Reason") != "no_upstream" {
		t.Errorf("big-model before discovery = %d %s, want 503 no_upstream", rec.Code, rec.Body.String())
	}
	if rec := sendNoModel(t, a); rec.Code != 503 && rec.Code != 400 {
		t.Errorf("no model before discovery = %d %s, want a refusal", rec.Code, rec.Body.String())
	}
	if n := len(small.models()) + len(big.models()); n != 0 {
		t.Fatalf("%d requests reached a pod before its model list was known", n)
	}
	a.health.CheckAll(t.Context()) // a health round: both lists answer
	ready = httptest.NewRecorder()
	a.handler.ServeHTTP(ready, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec := sendModel(t, a, "big-model"); ready.Code != 200 || rec.Code != 200 || len(big.models()) != 1 || len(small.models()) != 0 {
		t.Errorf("after discovery: /readyz %d, big-model %d; pods got small %v big %v", ready.Code, rec.Code, small.models(), big.models())
	}
	// several models: a request without one is a guess, refused
	var body struct{ Error struct{ Param string } }
	rec := sendNoModel(t, a)
	if _ = json.Unmarshal(rec.Body.Bytes(), &body); rec.Code != 400 || body.Error.Param != "model" {
		t.Errorf("no model with two models served = %d %s, want 400 naming model", rec.Code, rec.Body.String())
	}
}

// With one model served, a request without a model goes to it and counts
// against its limit (issue 24: it escaped model_limits).
func TestNoModelTakesTheOnlyModel(t *testing.T) {
	pod := newModelPod(t, "only-model")
	a, err := newApp(mustParse(t, `
upstreams:
  - {name: pod, url: "`+pod.url+`", models: [only-model]}
fast_breaker: {qps: 0}
health_check: {interval: 1h}
model_limits: {only-model: {qps: 0.001, burst: 2}}
`), appOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{200, 200, 429} {
		if rec := sendNoModel(t, a); rec.Code != want {
			t.Errorf("request %d without a model = %d %s, want %d", i, rec.Code, rec.Body.String(), want)
		}
	}
	if got := pod.models(); len(got) != 2 {
		t.Errorf("the pod got %v, want 2 requests", got)
	}
}
