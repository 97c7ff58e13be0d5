package interop

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/syncbuf"
)

// haproxyConfig is a gateway in front of gatekeeper that speaks HTTP/2 to
// it (proto h2, plaintext: h2c with prior knowledge) and shares its
// connections between requests, as a gateway keeping few connections to a
// backend does (one thread: each thread keeps connections of its own). Its
// frontend listens on the socket the test hands it (fd 3), so no port is
// chosen before it starts; http-no-delay passes each event on as it comes
// (as bench/run's HAProxy does).
const haproxyConfig = `
global
  nbthread 1
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend clients
  bind fd@3
  option http-no-delay
  default_backend gatekeeper
backend gatekeeper
  option http-no-delay
  http-reuse always
  server gk %s proto h2
`

// TestHAProxyH2C puts HAProxy, whose HTTP/2 is its own (not Go's), in
// front of gatekeeper with server.h2c, and the uvicorn pod behind it
// (httptools, as vLLM runs): answers and streams relayed over HTTP/2 as the
// pod sent them, concurrent requests sharing one connection to gatekeeper,
// and a client that leaves mid-stream ending the pod's generation (HAProxy
// resets the stream; gatekeeper cancels the pod's request).
func TestHAProxyH2C(t *testing.T) {
	py := requireUvicorn(t)
	haproxy := requireSbin(t, "haproxy")
	bin := buildGatekeeper(t)
	pod := startUvicornPod(t, py, "httptools")
	gk, admin := startGatekeeper(t, bin, h2cPolicy(pod.url))
	front := startHAProxy(t, haproxy, strings.TrimPrefix(gk, "http://"))

	t.Run("answers and streams relayed over HTTP/2", func(t *testing.T) {
		chat := `"messages":[{"role":"user","content":"Hello there, how are you?"}]`
		for _, tt := range []struct{ name, path, body string }{
			{"completion", "/v1/completions", `{"model":"test-model","prompt":"Once upon a time","max_tokens":8}`},
			{"chat", "/v1/chat/completions", `{"model":"test-model",` + chat + `,"max_tokens":8}`},
			{"completion stream", "/v1/completions", `{"model":"test-model","prompt":"Once upon a time","max_tokens":8,"stream":true}`},
			{"chat stream with usage", "/v1/chat/completions",
				`{"model":"test-model",` + chat + `,"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}`},
		} {
			t.Run(tt.name, func(t *testing.T) {
				direct, via := post(t, pod.url+tt.path, tt.body), post(t, front+tt.path, tt.body)
				id := via.header.Get("X-Request-Id")
				if via.status != http.StatusOK || id == "" || !slices.Contains(pod.state(t).Completed, id) {
					t.Fatalf("status %d, id %q; want 200 and the id of a request the pod completed", via.status, id)
				}
				if got := strings.ReplaceAll(via.body, id, ""); got != direct.body {
					t.Errorf("through HAProxy and gatekeeper:\n%s\nwant the pod's own answer:\n%s", via.body, direct.body)
				}
			})
		}
	})

	t.Run("concurrent requests share one connection to gatekeeper", func(t *testing.T) {
		const n = 6 // within the window of 8
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for range n {
			wg.Go(func() {
				r, err := send(front+"/v1/completions", `{"model":"test-model","prompt":"x","max_tokens":40,"stream":true}`,
					"X-Test-Token-Delay-Ms", "100") // 4 s each: all six are in the pod at once, on a loaded machine too
				if err == nil && (r.status != http.StatusOK || !strings.HasSuffix(r.body, "data: [DONE]\n\n")) {
					err = fmt.Errorf("status %d, %q", r.status, r.body)
				}
				errs <- err
			})
		}
		waitFor(t, 10*time.Second, "all six requests in the pod", func() bool { return pod.state(t).Inflight == n })
		if c := counter(t, admin, "gatekeeper_client_connections"); c != 1 {
			t.Errorf("gatekeeper holds %v client connections with %d requests in flight, want 1 (HTTP/2 from HAProxy)", c, n)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("a client that leaves mid-stream ends the pod's generation", func(t *testing.T) {
		closed0 := counter(t, admin, `gatekeeper_requests_total{outcome="client_closed"}`)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, front+"/v1/completions",
			strings.NewReader(`{"model":"test-model","prompt":"leave","max_tokens":1000,"stream":true}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", "leave-h2c")
		req.Header.Set("X-Test-Token-Delay-Ms", "20") // 20 s in all
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := res.Body.Read(make([]byte, 1)); err != nil {
			t.Fatalf("first byte: %v", err)
		}
		cancel()
		res.Body.Close()
		waitFor(t, 10*time.Second, "the pod to see its client gone", func() bool {
			return slices.Contains(pod.state(t).Aborted, "leave-h2c")
		})
		waitFor(t, 10*time.Second, "gatekeeper to count it client_closed and release its slot", func() bool {
			return counter(t, admin, `gatekeeper_requests_total{outcome="client_closed"}`) == closed0+1 && gatekeeperInflight(t, admin) == 0
		})
		if slices.Contains(pod.state(t).Completed, "leave-h2c") {
			t.Error("the pod completed the request, want it cancelled")
		}
	})
}

// h2cPolicy is uvicornPolicy with server.h2c.
func h2cPolicy(podURL string) string {
	return strings.Replace(fmt.Sprintf(uvicornPolicy, podURL), "shutdown_timeout: 2s}", "shutdown_timeout: 2s, h2c: true}", 1)
}

// startHAProxy runs HAProxy in front of backend (host:port) until the test
// ends and returns its frontend's URL. The frontend's socket is opened here
// and handed over, so it accepts connections before HAProxy has started.
func startHAProxy(t *testing.T, haproxy, backend string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close() // HAProxy holds its own copy
	f, err := l.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(haproxyConfig, backend)), 0o600); err != nil {
		t.Fatal(err)
	}
	check := exec.Command(haproxy, "-c", "-f", cfg)
	check.ExtraFiles = []*os.File{f} // the bind line checks its socket
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	cmd := exec.Command(haproxy, "-db", "-f", cfg) // -db: foreground, no daemon
	cmd.ExtraFiles = []*os.File{f}                 // fd 3
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("haproxy output:\n%s", out.String())
		}
	})
	return "http://" + l.Addr().String()
}
