package interop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// policy is gatekeeper's policy for the interop runs: one fake pod with a
// window of one request, a short queue wait and Retry-After of one second.
// The fast breaker line is the one thing the scenarios change.
const policy = `
server: {listen: "127.0.0.1:0", admin_listen: "127.0.0.2:0", drain_delay: 0s, shutdown_timeout: 2s}
upstreams:
  - {name: fake, url: %q, max_inflight: 1, min_inflight: 1}
health_check: {interval: 1h, timeout: 1s}
queue: {max_wait: 200ms, starvation_after: 100ms}
shed: {retry_after: 1s}
%s
`

// minRetryGap is the least gap between two attempts when gatekeeper said
// Retry-After: 1. The SDK sleeps exactly 1000 ms before the next attempt;
// the slack only absorbs timer granularity. It is a lower bound, never an
// upper one, so a slow machine cannot make it fail.
const minRetryGap = 950 * time.Millisecond

// TestOpenAINodeSDK runs the official OpenAI Node SDK against a gatekeeper
// binary in front of a fake vLLM: plain and streaming calls pass through,
// 429 and 503 are retried after Retry-After, and past maxRetries the SDK
// throws the OpenAI-style error gatekeeper wrote.
func TestOpenAINodeSDK(t *testing.T) {
	node := requireNodeSDK(t)
	bin := buildGatekeeper(t)
	pod, podURL := newFakeVLLM(t)

	t.Run("chat and completions, streaming and not", func(t *testing.T) {
		gk, _ := startGatekeeper(t, bin, fmt.Sprintf(policy, podURL, "fast_breaker: {qps: 0}"))
		tp, base := newTap(t, gk)
		var got struct {
			Chat, ChatStream, Completion, CompletionStream string
			ChatUsage, ChatChunks, CompletionChunks        int
		}
		runNode(t, node, "basic", base+"/v1", &got)
		want := strings.Join(words(), "")
		for name, v := range map[string]string{"chat": got.Chat, "chat stream": got.ChatStream,
			"completion": got.Completion, "completion stream": got.CompletionStream} {
			if v != want {
				t.Errorf("%s text = %q, want %q", name, v, want)
			}
		}
		if got.ChatChunks != len(words()) || got.CompletionChunks != len(words()) {
			t.Errorf("stream chunks = %d chat, %d completion, want %d each", got.ChatChunks, got.CompletionChunks, len(words()))
		}
		if got.ChatUsage != 8 {
			t.Errorf("chat usage.total_tokens = %d, want 8", got.ChatUsage)
		}
		for _, h := range tp.take() {
			if h.status != http.StatusOK {
				t.Errorf("%s answered %d, want 200", h.path, h.status)
			}
		}
	})

	t.Run("429 is retried after Retry-After", func(t *testing.T) {
		gk, _ := startGatekeeper(t, bin, fmt.Sprintf(policy, podURL, "fast_breaker: {qps: 1, burst: 1}"))
		tp, base := newTap(t, gk)
		var got struct{ First, Second string }
		runNode(t, node, "retry", base+"/v1", &got)
		if got.Second != strings.Join(words(), "") {
			t.Errorf("second call = %q, want the model's answer after the retry", got.Second)
		}
		hits := tp.take()
		if statuses(hits) != "200 429 200" {
			t.Fatalf("attempts = %s, want 200 429 200 (the 429 retried)", statuses(hits))
		}
		if hits[1].retryAfter != "1" {
			t.Errorf("429 Retry-After = %q, want 1", hits[1].retryAfter)
		}
		if gap := hits[2].at.Sub(hits[1].at); gap < minRetryGap {
			t.Errorf("retry came %v after the 429, want >= %v (Retry-After: 1)", gap, minRetryGap)
		}
	})

	t.Run("503 past maxRetries surfaces the OpenAI error", func(t *testing.T) {
		gk, _ := startGatekeeper(t, bin, fmt.Sprintf(policy, podURL, "fast_breaker: {qps: 0}"))
		holder := hold(t, gk, pod) // fills the window of one
		tp, base := newTap(t, gk)
		var got struct {
			Thrown, Message, Code, Type, RetryAfter, Reason string
			Status                                          int
		}
		runNode(t, node, "giveup", base+"/v1", &got)
		if got.Thrown == "" || got.Status != http.StatusServiceUnavailable || got.Code != "queue_timeout" ||
			got.Message == "" || got.Type != "server_error" || got.RetryAfter != "1" {
			t.Errorf("SDK error = %+v, want a thrown 503 with code queue_timeout, type server_error, a message and Retry-After 1", got)
		}
		hits := tp.take()
		if statuses(hits) != "503 503 503" {
			t.Fatalf("attempts = %s, want 503 503 503 (maxRetries 2, then give up)", statuses(hits))
		}
		for i := 1; i < len(hits); i++ {
			if gap := hits[i].at.Sub(hits[i-1].at); gap < minRetryGap {
				t.Errorf("attempt %d came %v after the previous, want >= %v (Retry-After: 1)", i+1, gap, minRetryGap)
			}
		}
		pod.releaseHeld()
		if code := <-holder; code != http.StatusOK {
			t.Errorf("held request = %d, want 200 once released", code)
		}
	})
}

func statuses(hs []hit) string {
	s := make([]string, len(hs))
	for i, h := range hs {
		s[i] = fmt.Sprint(h.status)
	}
	return strings.Join(s, " ")
}

// requireNodeSDK returns node's path, or skips when node or the pinned SDK
// is not installed; under GATEKEEPER_REQUIRE_TOOLS=1 (CI) it fails instead.
func requireNodeSDK(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		missingTool(t, "node not found: install Node.js >= 20 and run scripts/install/node-deps.sh to run the OpenAI SDK interop test")
	}
	if _, err := os.Stat(filepath.Join("node_modules", "openai", "package.json")); err != nil {
		missingTool(t, "interop/node_modules/openai missing: run scripts/install/node-deps.sh (npm ci in interop/)")
	}
	return node
}

// missingTool skips the test for want of what msg names, or fails it under
// GATEKEEPER_REQUIRE_TOOLS=1 (CI, which installs every tool first).
func missingTool(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("GATEKEEPER_REQUIRE_TOOLS") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// requireSbin returns the path of a Debian server (nginx, haproxy), which
// lives in /usr/sbin, not on every PATH, or skips (fails in CI) naming the
// scripts/install script of the same name.
func requireSbin(t *testing.T, name string) string {
	t.Helper()
	for _, p := range []string{name, "/usr/sbin/" + name} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	missingTool(t, name+" not found: run scripts/install/"+name+".sh (Debian's "+name+")")
	return ""
}

// stopWithin asks a process the test started to stop (ask) and waits for
// exited to be closed; after 10 s it kills it (kill), waits, and fails the
// test, saying what did not stop after what.
func stopWithin(t *testing.T, what, after string, exited <-chan struct{}, ask, kill func()) {
	t.Helper()
	ask()
	select {
	case <-exited:
	case <-time.After(10 * time.Second): // a bound, not a wait for state
		kill()
		<-exited
		t.Errorf("%s did not stop within 10 s of %s", what, after)
	}
}

// buildGatekeeper builds the binary under test into a temp folder.
func buildGatekeeper(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH: cannot build the gatekeeper binary")
	}
	bin := filepath.Join(t.TempDir(), "gatekeeper")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goBin, "build", "-o", bin, "../cmd/gatekeeper").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/gatekeeper: %v\n%s", err, out)
	}
	return bin
}

// startGatekeeper runs the binary with policyText until the test ends and
// returns its traffic and admin URLs, read from the "gatekeeper started" log
// line.
func startGatekeeper(t *testing.T, bin, policyText string) (traffic, admin string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(policyText), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-config", path)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	addr := make(chan [2]string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			logs.Write(sc.Bytes())
			logs.WriteByte('\n')
			mu.Unlock()
			var line struct {
				Msg, Listen string
				Admin       string `json:"admin_listen"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "gatekeeper started" {
				addr <- [2]string{line.Listen, line.Admin}
			}
		}
	}()
	exited := make(chan struct{}) // closed once the process is gone
	var waitErr error
	go func() { <-scanned; waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		stopWithin(t, "gatekeeper", "SIGTERM", exited,
			func() { _ = cmd.Process.Signal(syscall.SIGTERM) }, func() { _ = cmd.Process.Kill() })
		if t.Failed() {
			mu.Lock()
			t.Logf("gatekeeper log:\n%s", logs.String())
			mu.Unlock()
		}
	})
	select {
	case a := <-addr:
		return "http://" + a[0], "http://" + a[1]
	case <-exited:
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("gatekeeper exited before serving: %v\n%s", waitErr, logs.String())
	case <-time.After(20 * time.Second):
		t.Fatal("gatekeeper did not log \"gatekeeper started\" within 20 s")
	}
	return "", ""
}

// hold sends a request the fake pod keeps until released and returns once
// the pod has it, so gatekeeper's window of one is full. The channel gets its
// status.
func hold(t *testing.T, gk string, pod *fakeVLLM) <-chan int {
	t.Helper()
	out := make(chan int, 1)
	client := &http.Client{Timeout: 30 * time.Second}
	go func() {
		res, err := client.Post(gk+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"hold","prompt":"hold","max_tokens":1}`))
		if err != nil {
			out <- 0
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		out <- res.StatusCode
	}()
	select {
	case <-pod.held:
	case code := <-out:
		t.Fatalf("held request finished early with %d", code)
	case <-time.After(10 * time.Second):
		t.Fatal("held request did not reach the pod within 10 s")
	}
	return out
}

// runNode runs client.mjs for scenario against base and decodes its JSON
// result into out.
func runNode(t *testing.T, node, scenario, base string, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs", scenario, base)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client.mjs %s: %v\nstderr: %s\nstdout: %s", scenario, err, stderr.String(), stdout.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("node client.mjs %s printed %q: %v", scenario, stdout.String(), err)
	}
}
