package main

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestWindowCountsSequences: the window's slots are vLLM sequences, so a
// request with n = 6 holds 6 of 8, one with n = 4 waits (here until its
// max_wait), and one with n = 2 still fits.
func TestWindowCountsSequences(t *testing.T) {
	held := make(chan struct{})
	release := make(chan struct{})
	var mu sync.Mutex
	var seen []string // the bodies the pod received
	pod := http.NewServeMux()
	pod.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, string(b))
		mu.Unlock()
		if strings.Contains(string(b), `"hold"`) {
			close(held)
			<-release
		}
		_, _ = io.WriteString(w, `{"choices":[]}`)
	})
	pod.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {})
	ps := newPodServer(t, pod)
	traffic, admin, _, _ := startApp(t, "upstreams:\n  - name: pod-a\n    url: "+ps+"\n    max_inflight: 8\n"+
		"queue: {max_wait: 300ms, starvation_after: 100ms}\nserver: {drain_delay: 0s}\n")
	post := func(body string) int {
		res, err := http.Post(traffic+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	first := make(chan int, 1)
	go func() { first <- post(`{"model":"m","prompt":"hold","n":6,"max_tokens":4}`) }()
	<-held
	if st := fetch(t, admin+"/admin/state"); !strings.Contains(st, `"inflight": 6`) {
		t.Errorf("/admin/state while n=6 runs lacks \"inflight\": 6:\n%s", st)
	}
	if code := post(`{"model":"m","prompt":"four","n":4,"max_tokens":4}`); code != http.StatusServiceUnavailable {
		t.Errorf("n=4 beside n=6 on a window of 8: %d, want 503 after its max_wait", code)
	}
	if code := post(`{"model":"m","prompt":"two","n":2,"max_tokens":4}`); code != http.StatusOK {
		t.Errorf("n=2 beside n=6 on a window of 8: %d, want 200", code)
	}
	close(release)
	if code := <-first; code != http.StatusOK {
		t.Errorf("n=6: %d, want 200", code)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range seen {
		if strings.Contains(b, `"four"`) {
			t.Errorf("the pod received the n=4 request: %s", b)
		}
	}
}
