package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// A request whose estimate no queue bound can ever hold gets a 400 that
// says why on an idle gatekeeper, not 503 queue_full "retry later"
// (issue 24: n: 64 with max_tokens: 65536 is 4 M tokens).
func TestTooLargeForTheQueueIs400(t *testing.T) {
	pod := newPodServer(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	traffic, _, a, stop := startApp(t, `
upstreams: [{name: pod, url: "`+pod+`"}]
server: {drain_delay: 0s}
`)
	defer stop()
	res, err := http.Post(traffic+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"m","prompt":"hi","n":64,"max_tokens":65536}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var e struct {
		Error struct{ Message, Type, Code string }
	}
	if err := json.NewDecoder(res.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusBadRequest || res.Header.Get("X-Gatekeeper-Reason") != "too_large" ||
		res.Header.Get("Retry-After") != "" || e.Error.Type != "invalid_request_error" ||
		!strings.Contains(e.Error.Message, "queue.max_tokens") {
		t.Errorf("= %d %q Retry-After %q %+v; want 400 too_large naming queue.max_tokens, no Retry-After",
			res.StatusCode, res.Header.Get("X-Gatekeeper-Reason"), res.Header.Get("Retry-After"), e.Error)
	}
	stop()
	if got := outcomeCounts(t, a); got["bad_request"] != 1 {
		t.Errorf("outcomes %v, want one bad_request", got)
	}
}
