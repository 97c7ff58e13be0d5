package deploy

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// lookTool returns the path of a program the test needs. When it is absent
// the test skips, naming the script that installs it, or fails when
// GATEKEEPER_REQUIRE_TOOLS=1 (CI, which installs every tool first).
// Programs that go install puts in GOBIN or GOPATH/bin are found there too.
func lookTool(t *testing.T, name, install string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if goBin, err := exec.LookPath("go"); err == nil {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, goBin, "env", "GOBIN", "GOPATH").Output()
		if err == nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			for _, dir := range []string{lines[0], filepath.Join(lines[len(lines)-1], "bin")} {
				p := filepath.Join(dir, name)
				if fi, err := os.Stat(p); dir != "" && err == nil && !fi.IsDir() {
					return p
				}
			}
		}
	}
	msg := name + " not found on PATH nor in GOBIN/GOPATH/bin; install it with " + install
	if os.Getenv("GATEKEEPER_REQUIRE_TOOLS") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// runTool runs a program with a bounded time and returns its combined
// output and exit error.
func runTool(t *testing.T, timeout time.Duration, stdin []byte, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %s: did not finish within %v", filepath.Base(name), strings.Join(args, " "), timeout)
	}
	return string(out), err
}

// freeAddr returns a loopback address with a port that was free a moment
// ago, for a child process that needs its port up front.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return addr
}
