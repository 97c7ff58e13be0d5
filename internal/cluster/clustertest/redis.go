// Package clustertest runs a real redis-server for tests: on a free
// loopback port, in a temporary directory, persisting nothing. Stop and
// Start play an outage on the same port.
package clustertest

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is a real redis-server on a loopback port, in a temporary
// directory, persisting nothing. Tests stop and start it again on the same
// port to play an outage.
type Server struct {
	tb   testing.TB
	bin  string
	dir  string
	addr string
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// StartRedis starts a redis-server and stops it in tb.Cleanup. Without the
// binary the test skips, or fails under GATEKEEPER_REQUIRE_TOOLS=1 (CI,
// which runs scripts/install/redis.sh first).
func StartRedis(tb testing.TB) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server not found on PATH; install it with scripts/install/redis.sh"
		if os.Getenv("GATEKEEPER_REQUIRE_TOOLS") == "1" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		tb.Fatalf("close: %v", err)
	}
	r := &Server{tb: tb, bin: bin, dir: tb.TempDir(), addr: addr}
	r.Start()
	tb.Cleanup(r.Stop)
	return r
}

// URL is the server's redis:// URL, database 0.
func (r *Server) URL() string { return "redis://" + r.addr + "/0" }

// Addr is the server's host:port.
func (r *Server) Addr() string { return r.addr }

// Start runs the server and waits (at most 10 s) until it answers PING.
func (r *Server) Start() {
	r.tb.Helper()
	_, port, _ := net.SplitHostPort(r.addr)
	r.cmd = exec.Command(r.bin, "--bind", "127.0.0.1", "--port", port,
		"--save", "", "--appendonly", "no", "--dir", r.dir,
		"--logfile", filepath.Join(r.dir, "redis.log"), "--daemonize", "no",
		"--enable-debug-command", "local") // DEBUG SLEEP from loopback: a slow Redis
	if err := r.cmd.Start(); err != nil {
		r.tb.Fatalf("start redis-server: %v", err)
	}
	r.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { // owned: stop waits for it
		_ = cmd.Wait()
		close(done)
	}(r.cmd, r.done)
	deadline := time.Now().Add(10 * time.Second)
	for !r.ping() {
		select {
		case <-r.done:
			r.tb.Fatalf("redis-server exited at start; log:\n%s", r.log())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.tb.Fatalf("redis-server did not answer within 10s; log:\n%s", r.log())
		}
	}
}

// Stop ends the server (SIGTERM, then SIGKILL after 10 s) and waits for it.
// Stopping a stopped server does nothing.
func (r *Server) Stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(os.Interrupt)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	r.cmd = nil
}

// Kill ends the server with SIGKILL, as a crash or an OOM kill would, and
// waits for it; it persists nothing, so Start brings it back empty.
func (r *Server) Kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.done
	r.cmd = nil
}

// Pause stops the server with SIGSTOP: connections stay open and nothing
// answers until Resume (SIGCONT), as in a long GC pause or a frozen VM.
func (r *Server) Pause() {
	if r.cmd != nil {
		_ = r.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Resume continues a paused server.
func (r *Server) Resume() {
	if r.cmd != nil {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
	}
}

func (r *Server) ping() bool {
	c, err := net.DialTimeout("tcp", r.addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

func (r *Server) log() string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
	return string(b)
}
