package interop

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nginxConfig fronts gatekeeper (%[2]s, host:port) twice, on unix sockets
// in %[1]s: "ingress" as ingress-nginx configures its upstreams (HTTP/1.1
// with keep-alive, responses not buffered), "defaults" with nginx's own
// proxy defaults (HTTP/1.0, a connection a request, responses buffered).
// nginx runs in the foreground, all of it under %[1]s.
const nginxConfig = `
daemon off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  upstream gatekeeper { server %[2]s; keepalive 8; }
  server {
    listen unix:%[1]s/ingress.sock;
    location / {
      proxy_pass http://gatekeeper;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
  server {
    listen unix:%[1]s/defaults.sock;
    location / { proxy_pass http://%[2]s; }
  }
}
`

// TestBehindNginx puts nginx in front of gatekeeper, as an ingress does,
// and the uvicorn pod behind it: answers and streams relayed as the pod
// sent them (over HTTP/1.0 too, where the answer's end is the connection's),
// and a client that leaves mid-stream ending the pod's generation (nginx
// closes its connection to gatekeeper).
func TestBehindNginx(t *testing.T) {
	py := requireUvicorn(t)
	nginx := requireSbin(t, "nginx")
	bin := buildGatekeeper(t)
	pod := startUvicornPod(t, py, "httptools")
	gk, admin := startGatekeeper(t, bin, fmt.Sprintf(uvicornPolicy, pod.url))
	dir := startNginx(t, nginx, strings.TrimPrefix(gk, "http://"))
	for _, front := range []string{"ingress", "defaults"} {
		t.Run(front, func(t *testing.T) {
			client := unixClient(filepath.Join(dir, front+".sock"))
			t.Run("answers and streams relayed", func(t *testing.T) {
				chat := `"messages":[{"role":"user","content":"Hello there, how are you?"}]`
				for _, tt := range []struct{ path, body string }{
					{"/v1/completions", `{"model":"test-model","prompt":"Once upon a time","max_tokens":8}`},
					{"/v1/chat/completions", `{"model":"test-model",` + chat + `,"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}`},
				} {
					direct := post(t, pod.url+tt.path, tt.body)
					res, err := client.Post("http://nginx"+tt.path, "application/json", strings.NewReader(tt.body))
					if err != nil {
						t.Fatal(err)
					}
					var b strings.Builder
					_, err = bufio.NewReader(res.Body).WriteTo(&b)
					res.Body.Close()
					id := res.Header.Get("X-Request-Id")
					if err != nil || res.StatusCode != 200 || id == "" || !slices.Contains(pod.state(t).Completed, id) {
						t.Fatalf("%s: %d, id %q, %v; want 200 and the id of a request the pod completed", tt.path, res.StatusCode, id, err)
					}
					if got := strings.ReplaceAll(b.String(), id, ""); got != direct.body {
						t.Errorf("%s through nginx and gatekeeper:\n%s\nwant the pod's own answer:\n%s", tt.path, got, direct.body)
					}
				}
			})
			t.Run("a client that leaves mid-stream ends the pod's generation", func(t *testing.T) {
				id := "nginx-leave-" + front
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://nginx/v1/completions",
					strings.NewReader(`{"model":"test-model","prompt":"leave","max_tokens":1000,"stream":true}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Request-Id", id)
				req.Header.Set("X-Test-Token-Delay-Ms", "20") // 20 s in all
				done := make(chan error, 1)
				go func() {
					res, err := client.Do(req)
					if err == nil {
						res.Body.Close()
					}
					done <- err
				}()
				waitFor(t, 10*time.Second, "the pod to start the request", func() bool {
					return slices.Contains(pod.state(t).Started, id)
				})
				cancel() // nginx's defaults buffer the answer: the client may have no byte yet
				<-done
				waitFor(t, 10*time.Second, "the pod to see its client gone", func() bool {
					return slices.Contains(pod.state(t).Aborted, id)
				})
				waitFor(t, 10*time.Second, "gatekeeper to release the slot", func() bool {
					return gatekeeperInflight(t, admin) == 0
				})
			})
		})
	}
}

// unixClient is an HTTP client whose every connection goes to sock.
func unixClient(sock string) *http.Client {
	var d net.Dialer
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) },
	}}
}

// startNginx runs nginx in front of backend until the test ends and returns
// the folder that holds its sockets, once both accept connections.
func startNginx(t *testing.T, nginx, backend string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(nginxConfig, dir, backend)), 0o600); err != nil {
		t.Fatal(err)
	}
	// Its output goes to a file, not a pipe: the workers inherit it, and a
	// pipe would hold cmd.Wait until the last of them is gone.
	out, err := os.Create(filepath.Join(dir, "output.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(nginx, "-c", cfg, "-p", dir)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its workers too, for the kill below
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		stopWithin(t, "nginx", "SIGTERM", exited,
			func() { _ = cmd.Process.Signal(syscall.SIGTERM) },             // nginx's fast shutdown: the master stops its workers
			func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }) // and its workers
		if t.Failed() {
			output, _ := os.ReadFile(filepath.Join(dir, "output.log"))
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Logf("nginx output:\n%s\nerror.log:\n%s", output, log)
		}
	})
	waitFor(t, 10*time.Second, "nginx to listen", func() bool {
		for _, s := range []string{"ingress.sock", "defaults.sock"} {
			c, err := net.Dial("unix", filepath.Join(dir, s))
			if err != nil {
				return false
			}
			c.Close()
		}
		return true
	})
	return dir
}
