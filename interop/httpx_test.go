package interop

import (
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/syncbuf"
)

// httpxAnswer is what httpx_client.py reports of one answer.
type httpxAnswer struct {
	Status  int
	Version string
	ID      string
	Reason  string
}

// TestPythonHTTPX drives gatekeeper with httpx, the HTTP client under the
// OpenAI Python SDK (interop/httpx_client.py; Debian's python3-httpx and
// python3-h2), on HTTP/1.1 and on HTTP/2 with prior knowledge (server.h2c),
// in front of the uvicorn pod: a completion and a chat stream read line by
// line; a body over max_body_bytes sent whole before the answer is read,
// which must come back as the 413 (a reset stream is a protocol error to
// httpx, which the SDK retries body and all); and a stream closed after its
// first event, which must end the pod's generation and free the slot.
func TestPythonHTTPX(t *testing.T) {
	py := requireUvicorn(t)
	if exec.Command(py, "-c", "import httpx, h2").Run() != nil {
		missingTool(t, "python3 with httpx and h2 not found: run scripts/install/httpx.sh (Debian's python3-httpx, python3-h2)")
	}
	bin := buildGatekeeper(t)
	pod := startUvicornPod(t, py, "httptools")
	gk, admin := startGatekeeper(t, bin, h2cPolicy(pod.url))
	for _, version := range []string{"http1", "http2"} {
		proto := map[string]string{"http1": "HTTP/1.1", "http2": "HTTP/2"}[version]
		t.Run(version, func(t *testing.T) {
			t.Run("a completion and a stream", func(t *testing.T) {
				var out struct {
					Completion struct {
						httpxAnswer
						Text string
					}
					Stream struct {
						httpxAnswer
						Events []string
					}
				}
				runHTTPX(t, py, gk, version, "relay", &out)
				c, s := out.Completion, out.Stream
				if c.Status != 200 || c.Version != proto || c.Text != "w0 w1 w2 w3 w4 w5 w6 w7 " || !slices.Contains(pod.state(t).Completed, c.ID) {
					t.Errorf("completion %+v, want 200 over %s, the pod's text and an id it completed", c, proto)
				}
				if s.Status != 200 || s.Version != proto || len(s.Events) != 10 || s.Events[len(s.Events)-1] != "data: [DONE]" {
					t.Errorf("stream %d over %s, %d events ending %q; want 200 over %s, 10 ending with [DONE]",
						s.Status, s.Version, len(s.Events), s.Events[max(len(s.Events)-1, 0):], proto)
				}
			})
			t.Run("a body over the limit sent whole gets its 413", func(t *testing.T) {
				var out struct {
					httpxAnswer
					Code  string
					Error string
					After httpxAnswer
				}
				runHTTPX(t, py, gk, version, "large", &out)
				if out.Error != "" || out.Status != 413 || out.Version != proto || out.Code != "bad_request" || out.After.Status != 200 {
					t.Errorf("%+v; want 413 bad_request over %s, then 200", out, proto)
				}
			})
			t.Run("a stream closed after its first event ends the pod's generation", func(t *testing.T) {
				id := "httpx-leave-" + version
				var out struct {
					First string
					After httpxAnswer
				}
				runHTTPX(t, py, gk, version, "leave", &out, id)
				if !strings.HasPrefix(out.First, "data: {") || out.After.Status != 200 {
					t.Errorf("%+v; want a first event, then 200", out)
				}
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

// runHTTPX runs httpx_client.py and decodes what it prints into out.
func runHTTPX(t *testing.T, py, base, version, scenario string, out any, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{"httpx_client.py", base, version, scenario}, args...)...)
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("httpx_client.py %s %s: %v\n%s", version, scenario, err, stderr.String())
	}
	if err := json.Unmarshal(stdout, out); err != nil {
		t.Fatalf("httpx_client.py %s %s printed %q: %v", version, scenario, stdout, err)
	}
}
