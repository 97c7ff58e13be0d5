package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

// lifecycleRig runs an app on loopback with a stage hook the test steps through.
type lifecycleRig struct {
	traffic, admin string
	path           string
	hup            chan os.Signal
	stages         chan string
	acks           chan struct{}
	cancel         context.CancelFunc
	done           chan error
}

func startLifecycle(t *testing.T, policy string, blocking map[string]bool) *lifecycleRig {
	t.Helper()
	r := &lifecycleRig{path: filepath.Join(t.TempDir(), "config.yaml"), hup: make(chan os.Signal, 1),
		stages: make(chan string, 64), acks: make(chan struct{}), done: make(chan error, 1)}
	if err := os.WriteFile(r.path, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadFile(r.path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := newApp(cfg, appOptions{path: r.path, stage: func(name string) {
		if blocking[name] {
			r.stages <- name
			<-r.acks
			return
		}
		select {
		case r.stages <- name:
		default: // 64 unread: a stage nobody waits for (a round every interval) must not stall the app
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	tl, _ := net.Listen("tcp", "127.0.0.1:0")
	al, _ := net.Listen("tcp", "127.0.0.1:0")
	r.traffic, r.admin = "http://"+tl.Addr().String(), "http://"+al.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- a.serveOn(ctx, tl, al, r.hup) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Error("serveOn did not return")
		}
	})
	return r
}

// waitStage waits for the named stage, skipping others.
func (r *lifecycleRig) waitStage(t *testing.T, name string) {
	t.Helper()
	timeout := time.After(20 * time.Second) // a bound, not a wait for state
	for {
		select {
		case got := <-r.stages:
			if got == name {
				return
			}
		case <-timeout:
			t.Fatalf("stage %q never came", name)
		}
	}
}

func TestSIGTERMDrains(t *testing.T) {
	release := make(chan struct{})
	pod := http.NewServeMux()
	pod.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	pod.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if strings.Contains(r.Header.Get("X-Test"), "stream") {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: one\n\n")
			w.(http.Flusher).Flush()
			<-release
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
			return
		}
		_, _ = io.WriteString(w, `{}`)
	})
	podURL := newPodServer(t, pod)
	r := startLifecycle(t, "upstreams: [{name: p, url: '"+podURL+"'}]\nserver: {drain_delay: 100ms, shutdown_timeout: 20s}\n",
		map[string]bool{"draining": true, "refusing": true})

	// A stream is running when SIGTERM arrives.
	req, _ := http.NewRequest(http.MethodPost, r.traffic+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"x","stream":true}`))
	req.Header.Set("X-Test", "stream")
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(stream.Body)
	if line, _ := rd.ReadString('\n'); line != "data: one\n" {
		t.Fatalf("first chunk = %q", line)
	}

	r.cancel() // what SIGTERM does through signal.NotifyContext
	var res *http.Response
	r.waitStage(t, "draining")
	if code := status(t, http.MethodGet, r.traffic+"/readyz"); code != 503 {
		t.Errorf("/readyz while draining = %d, want 503", code)
	}
	res, err = http.Post(r.traffic+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || !res.Close {
		t.Errorf("request during drain_delay = %d (close %v), want 200 with Connection: close", res.StatusCode, res.Close)
	}
	r.acks <- struct{}{}

	r.waitStage(t, "refusing")
	res, err = http.Post(r.traffic+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 503 || res.Header.Get("X-Gatekeeper-Reason") != "draining" || res.Header.Get("Retry-After") == "" {
		t.Errorf("request after drain_delay = %d %q, want 503 draining with Retry-After", res.StatusCode, res.Header.Get("X-Gatekeeper-Reason"))
	}
	r.acks <- struct{}{}

	// The running stream finishes cleanly, then the process stops with nil.
	close(release)
	rest, err := io.ReadAll(rd)
	if err != nil || !strings.Contains(string(rest), "[DONE]") {
		t.Errorf("stream after SIGTERM ended with %q, %v; want [DONE] and no reset", rest, err)
	}
	stream.Body.Close()
	r.waitStopped(t)
}

// waitStopped waits for serveOn to return after a SIGTERM, which must be
// with nil (exit 0).
func (r *lifecycleRig) waitStopped(t *testing.T) {
	t.Helper()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("serveOn() = %v, want nil (exit 0)", err)
		}
		r.done <- nil // for Cleanup
	case <-time.After(20 * time.Second): // a bound, not a wait for state
		t.Fatal("serveOn did not return")
	}
}

func status(t *testing.T, method, url string) int {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"model":"m","prompt":"x"}`)
	}
	req, _ := http.NewRequest(method, url, body)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

func TestReload(t *testing.T) {
	pod := http.NewServeMux()
	pod.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	podURL := newPodServer(t, pod)
	base := "upstreams: [{name: p, url: '" + podURL + "'}]\nserver: {drain_delay: 0s}\n"
	r := startLifecycle(t, base+"fast_breaker: {qps: 10}\n", nil)

	// A valid edit is applied (file watch).
	if err := os.WriteFile(r.path, []byte(base+"fast_breaker: {qps: 33}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.waitStage(t, "reloaded")
	if st := fetch(t, r.admin+"/admin/state"); !strings.Contains(st, `"qps": 33`) {
		t.Errorf("after a valid edit /admin/state has no qps 33:\n%s", st)
	}
	// An invalid edit is refused; the running policy stays.
	if err := os.WriteFile(r.path, []byte(base+"fast_breaker: {qps: -1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.waitStage(t, "reload_refused")
	// SIGHUP re-reads the file: still invalid, still refused.
	r.hup <- syscall.SIGHUP
	r.waitStage(t, "reload_refused")
	if st := fetch(t, r.admin+"/admin/state"); !strings.Contains(st, `"qps": 33`) {
		t.Errorf("after an invalid edit the running policy changed:\n%s", st)
	}
	if m := fetch(t, r.admin+"/metrics"); !strings.Contains(m, `gatekeeper_config_reloads_total{result="error"}`) ||
		strings.Contains(m, `gatekeeper_config_reloads_total{result="error"} 0`) {
		t.Errorf("reload error counter not incremented")
	}
}

// TestSIGTERMUnderLoadNoReset sends SIGTERM while eight keep-alive clients
// send requests back to back. Like a load balancer, they stop starting new
// requests once /readyz has turned 503 (here: after 200 answers while
// draining); every request already started must get its whole answer — no
// reset, no truncated body — and the process must stop cleanly.
//
// The draining stage blocks until the clients have stopped, so their 200
// answers come while gatekeeper drains (serving, readiness 503) and before
// drain_delay starts: on a busy machine 200 answers took longer than the 2 s
// drain_delay, gatekeeper refused and shut down under the clients, and the
// test failed with "no traffic flowed" (issue 35).
func TestSIGTERMUnderLoadNoReset(t *testing.T) {
	pod := http.NewServeMux()
	pod.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	pod.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"choices":[]}`)
	})
	podURL := newPodServer(t, pod)
	r := startLifecycle(t, "upstreams: [{name: p, url: '"+podURL+"'}]\nfast_breaker: {qps: 0}\n"+
		"server: {drain_delay: 2s, shutdown_timeout: 10s}\n", map[string]bool{"draining": true})
	// The draining stage waits for an ack; acknowledge it before
	// startLifecycle's own cleanup waits for serveOn.
	blocked := false
	t.Cleanup(func() {
		if blocked {
			r.acks <- struct{}{}
		}
	})

	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var stop, draining atomic.Bool
	var duringDrain atomic.Int32
	loaded := make(chan struct{}) // 200 answers arrived after /readyz turned 503
	oks := make(chan int, 8)
	problems := make(chan string, 64)
	started := make(chan struct{}, 8)
	for range 8 {
		go func() {
			ok := 0
			defer func() { oks <- ok }()
			for i := 0; i < 20000 && !stop.Load(); i++ { // bounded; the drain stops it long before
				if i == 1 {
					started <- struct{}{}
				}
				res, err := client.Post(r.traffic+"/v1/completions", "application/json",
					strings.NewReader(`{"model":"m","prompt":"x"}`))
				if err != nil {
					problems <- err.Error()
					return
				}
				body, err := io.ReadAll(res.Body)
				res.Body.Close()
				drained := res.StatusCode == 503 && res.Header.Get("X-Gatekeeper-Reason") == "draining"
				if err != nil || (res.StatusCode != 200 || string(body) != `{"choices":[]}`) && !drained {
					problems <- fmt.Sprintf("answer %d %q, err %v", res.StatusCode, body, err)
					return
				}
				ok++
				if draining.Load() && duringDrain.Add(1) == 200 {
					close(loaded)
				}
			}
		}()
	}
	for range 8 {
		<-started // every client has a connection in use
	}
	r.cancel() // SIGTERM
	r.waitStage(t, "draining")
	blocked = true
	draining.Store(true)
	select { // traffic keeps flowing while load balancers take note
	case <-loaded:
	case <-time.After(20 * time.Second):
		t.Fatalf("%d answers while draining in 20 s, want 200: traffic stopped flowing", duringDrain.Load())
	}
	stop.Store(true) // the load balancer saw /readyz turn 503
	total := 0
	for range 8 {
		total += <-oks
	}
	blocked = false
	r.acks <- struct{}{} // drain_delay starts
	close(problems)
	for p := range problems {
		t.Errorf("a client saw: %s", p)
	}
	r.waitStopped(t)
	t.Logf("%d requests answered in full around SIGTERM", total)
}
