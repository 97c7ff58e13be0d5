package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// TestReliefHooksFireOnLevelChanges checks that entering degraded, critical
// and back to normal calls the matching hooks, in the background, with the
// configured method, path (resolved against the pod) and body.
func TestReliefHooksFireOnLevelChanges(t *testing.T) {
	calls := make(chan string, 8)
	hooks := http.NewServeMux()
	hooks.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		calls <- r.Method + " " + r.URL.Path + " " + string(b) + " " + r.Header.Get("X-Token")
	})
	pod := newPodServer(t, hooks)
	cfg, err := config.Parse([]byte(`
upstreams: [{name: pod, url: "` + pod + `"}]
pressure: {hold: 1ms, rules: {fragmentation: {degrade: 1.2, shed: 1.5}}}  # no for: one round moves a level
hooks:
  degraded: [{url: /empty_cache, body: '{"why":"degraded"}', headers: {X-Token: t1}}]
  critical: [{method: PUT, url: "` + pod + `/shed"}]
  recovered: [{method: GET, url: /recovered}]
`))
	if err != nil {
		t.Fatal(err)
	}
	stages := make(chan string, 16)
	clock := time.Unix(0, 0)
	a, err := newApp(cfg, appOptions{stage: func(s string) { stages <- s }, now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	feed := func(v float64) {
		a.slow.Observe(pressure.State{Upstreams: []pressure.UpstreamState{{Name: "pod",
			Signals: map[pressure.Signal]pressure.Value{pressure.Fragmentation: {Value: v}}}}})
	}
	for _, step := range []struct {
		ratio float64
		want  string
	}{
		{1.3, `POST /empty_cache {"why":"degraded"} t1`},
		{1.6, "PUT /shed  "},
		{1.0, "GET /recovered  "},
	} {
		feed(step.ratio)
		if step.ratio == 1.0 {
			clock = clock.Add(time.Second) // past the hold (1 ms)
			feed(1.0)
		}
		if got := <-calls; got != step.want {
			t.Errorf("ratio %v: hook call %q, want %q", step.ratio, got, step.want)
		}
		for s := range stages {
			if s == "hook" {
				break
			}
		}
	}
	m := scrape(t, a)
	for _, want := range []string{
		`gatekeeper_hook_calls_total{hook="degraded",result="ok"} 1`,
		`gatekeeper_hook_calls_total{hook="critical",result="ok"} 1`,
		`gatekeeper_hook_calls_total{hook="recovered",result="ok"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
