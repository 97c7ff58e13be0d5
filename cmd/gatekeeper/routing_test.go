package main

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

// TestPodScoringWired: with two pods, pod scoring is on by default (the
// policy's Router is the queue's scorer): a request that shares its prefix
// with one pod a holds goes back to a although b has more room, the grant
// counts its blocks in gatekeeper_route_prefix_blocks_total, and a reload
// that sets every weight to 0 turns it off (the most free window: b).
func TestPodScoringWired(t *testing.T) {
	hold, held := make(chan struct{}), make(chan struct{})
	var once sync.Once
	pod := func(name string) http.Handler {
		mux := http.NewServeMux()
		mux.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
		mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			if strings.Contains(r.Header.Get("X-Test"), "hold") {
				once.Do(func() { close(held) })
				<-hold
			}
			_, _ = io.WriteString(w, `{"pod":"`+name+`"}`)
		})
		return mux
	}
	a, b := newPodServer(t, pod("a")), newPodServer(t, pod("b"))
	policy := "upstreams:\n  - {name: a, url: " + a + "}\n  - {name: b, url: " + b + "}\nserver: {drain_delay: 0s}\n"
	traffic, admin, app, _ := startApp(t, policy)
	body := `{"model":"m","max_tokens":8,"messages":[{"role":"system","content":"` +
		strings.Repeat("You answer questions about the billing system. ", 8) + `"},{"role":"user","content":"Q"}]}`
	send := func(tag string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, traffic+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Test", tag)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		got, _ := io.ReadAll(res.Body)
		return string(got)
	}
	first := make(chan string, 1)
	go func() { first <- send("hold") }()
	<-held // a runs the first request: equal scores, then the name
	if got := send("second"); got != `{"pod":"a"}` {
		t.Errorf("the same prefix while a holds one request and b none went to %s, want a", got)
	}
	if m := fetch(t, admin+"/metrics"); !strings.Contains(m, `gatekeeper_route_prefix_blocks_total{result="hit"}`) ||
		strings.Contains(m, `gatekeeper_route_prefix_blocks_total{result="hit"} 0`) {
		t.Errorf("/metrics lacks prefix block hits:\n%s", grepLines(m, "gatekeeper_route_prefix_blocks_total"))
	}
	off, err := config.Parse([]byte(policy + "routing: {scorers: {prefix: 0, load: 0, kv_cache: 0, memory: 0}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := app.policy.Set(off); err != nil {
		t.Fatal(err)
	}
	if got := send("off"); got != `{"pod":"b"}` {
		t.Errorf("with scoring off the same prefix went to %s, want b (the most free window)", got)
	}
	close(hold)
	if got := <-first; got != `{"pod":"a"}` {
		t.Errorf("the first request went to %s, want a", got)
	}
}
