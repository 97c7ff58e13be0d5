package interop

// The uvicorn pod of TestUvicornPod (vllm_app.py) and the helpers that ask
// it and gatekeeper what they did.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/syncbuf"
)

// requireUvicorn returns a python3 that has Debian's fastapi, uvicorn,
// httptools and prometheus_client (scripts/install/uvicorn.sh), or skips;
// under GATEKEEPER_REQUIRE_TOOLS=1 (CI) it fails instead.
func requireUvicorn(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		path, err := exec.LookPath(py)
		if err != nil {
			continue
		}
		check := exec.Command(path, "-c", "import fastapi, uvicorn, httptools, h11, prometheus_client")
		if check.Run() == nil {
			return path
		}
	}
	missingTool(t, "python3 with fastapi, uvicorn, httptools, h11 and prometheus_client not found: run scripts/install/uvicorn.sh")
	return ""
}

// uvicornPod is vllm_app.py running until the test ends.
type uvicornPod struct {
	url  string
	port int
}

// podState is vllm_app.py's GET /test/state.
type podState struct {
	Inflight    int            `json:"inflight"`
	MaxInflight int            `json:"max_inflight"`
	Started     []string       `json:"started"`
	Completed   []string       `json:"completed"`
	Aborted     []string       `json:"aborted"`
	Expected    []string       `json:"expected"`
	Clients     map[string]int `json:"clients"`
	BodyBytes   map[string]int `json:"body_bytes"`
}

func (p *uvicornPod) state(t *testing.T) podState {
	t.Helper()
	var s podState
	if err := json.Unmarshal([]byte(get(t, p.url+"/test/state")), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// startUvicornPod runs vllm_app.py on impl (uvicorn's --http) and returns
// it once it listens. Its stderr is shown if the test fails; it stops when
// its stdin closes.
func startUvicornPod(t *testing.T, py, impl string) *uvicornPod {
	t.Helper()
	cmd := exec.Command(py, "vllm_app.py", "--http", impl, "--timeout-keep-alive", strconv.Itoa(podKeepAlive))
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}) // closed once the process is gone
	t.Cleanup(func() {
		stopWithin(t, "the uvicorn pod", "its stdin closing", exited,
			func() { _ = stdin.Close() }, func() { _ = cmd.Process.Kill() })
		if t.Failed() {
			t.Logf("uvicorn pod (%s) stderr:\n%s", impl, stderr.String())
		}
	})
	first := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		first <- line
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(exited)
	}()
	var line string
	select {
	case line = <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("the uvicorn pod did not start within 30 s")
	}
	var ready struct{ Port int }
	if err := json.Unmarshal([]byte(line), &ready); err != nil || ready.Port == 0 {
		t.Fatalf("the uvicorn pod printed %q, want {\"port\": N}; stderr:\n%s", line, stderr.String())
	}
	return &uvicornPod{url: "http://127.0.0.1:" + strconv.Itoa(ready.Port), port: ready.Port}
}

// reply is an answer read in full.
type reply struct {
	status int
	header http.Header
	body   string
}

// post sends body to url as JSON, with header's names and values (name,
// value, ...), and reads the answer.
func post(t *testing.T, url, body string, header ...string) reply {
	t.Helper()
	r, err := send(url, body, header...)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return r
}

// send is post for a goroutine, where t.Fatal may not be called.
func send(url, body string, header ...string) (reply, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return reply{}, fmt.Errorf("reading the answer: %w", err)
	}
	return reply{status: res.StatusCode, header: res.Header, body: string(b)}, nil
}

func get(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	res, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", url, res.StatusCode, err)
	}
	return string(b)
}

// waitFor polls cond every 20 ms until it holds, failing the test after
// limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// counter reads one sample of gatekeeper's /metrics by its full name and
// labels; 0 if absent.
func counter(t *testing.T, admin, series string) float64 {
	t.Helper()
	for line := range strings.Lines(get(t, admin+"/metrics")) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// adminUpstream is the first upstream of gatekeeper's /admin/state.
func adminUpstream(t *testing.T, admin string) (level string, inflight int) {
	t.Helper()
	var v struct {
		Upstreams []struct {
			Level    string `json:"level"`
			Inflight int    `json:"inflight"`
		} `json:"upstreams"`
	}
	if err := json.Unmarshal([]byte(get(t, admin+"/admin/state")), &v); err != nil || len(v.Upstreams) == 0 {
		t.Fatalf("/admin/state: %v, %d upstreams", err, len(v.Upstreams))
	}
	return v.Upstreams[0].Level, v.Upstreams[0].Inflight
}

func upstreamLevel(t *testing.T, admin string) string {
	level, _ := adminUpstream(t, admin)
	return level
}

func gatekeeperInflight(t *testing.T, admin string) int {
	_, n := adminUpstream(t, admin)
	return n
}

// tcpEstablished reports whether /proc/net/tcp has an established socket
// from local port to remote port (on loopback, gatekeeper's end of a pod
// connection). Without /proc it skips the test.
func tcpEstablished(t *testing.T, local, remote int) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skipf("no /proc/net/tcp to see a connection's state: %v", err)
	}
	suffix := func(port int) string { return fmt.Sprintf(":%04X", port) }
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 3 && strings.HasSuffix(f[1], suffix(local)) && strings.HasSuffix(f[2], suffix(remote)) {
			return f[3] == "01" // TCP_ESTABLISHED
		}
	}
	return false
}
