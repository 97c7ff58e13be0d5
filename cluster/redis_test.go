package cluster

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a real redis-server on a loopback port, in a temporary
// directory, persisting nothing. Tests stop and start it again on the same
// port to play an outage.
type redisServer struct {
	tb   testing.TB
	bin  string
	dir  string
	addr string
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// startRedis starts a redis-server and stops it in tb.Cleanup. Without the
// binary the test skips, or fails under GATEKEEPER_REQUIRE_TOOLS=1 (CI,
// which runs scripts/install/redis.sh first).
func startRedis(tb testing.TB) *redisServer {
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
	r := &redisServer{tb: tb, bin: bin, dir: tb.TempDir(), addr: addr}
	r.start()
	tb.Cleanup(r.stop)
	return r
}

func (r *redisServer) url() string { return "redis://" + r.addr + "/0" }

// start runs the server and waits (at most 10 s) until it answers PING.
func (r *redisServer) start() {
	r.tb.Helper()
	_, port, _ := net.SplitHostPort(r.addr)
	r.cmd = exec.Command(r.bin, "--bind", "127.0.0.1", "--port", port,
		"--save", "", "--appendonly", "no", "--dir", r.dir,
		"--logfile", filepath.Join(r.dir, "redis.log"), "--daemonize", "no")
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

// stop ends the server (SIGTERM, then SIGKILL after 10 s) and waits for it.
// Stopping a stopped server does nothing.
func (r *redisServer) stop() {
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

func (r *redisServer) ping() bool {
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

func (r *redisServer) log() string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
	return string(b)
}

// client returns a plain go-redis client for the test's own reads (TIME).
func (r *redisServer) client() *redis.Client {
	r.tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.addr})
	r.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// redisNow reads Redis's clock.
func (r *redisServer) redisNow(ctx context.Context, c *redis.Client) time.Time {
	r.tb.Helper()
	now, err := c.Time(ctx).Result()
	if err != nil {
		r.tb.Fatalf("TIME: %v", err)
	}
	return now
}

// newCluster returns a Cluster on r with s's fields, a test-sized timeout
// unless s sets one, and closes it in Cleanup.
func newCluster(tb testing.TB, r *redisServer, s Settings) *Cluster {
	tb.Helper()
	s.URL = r.url()
	if s.Timeout == 0 {
		s.Timeout = 500 * time.Millisecond // a loaded, race-instrumented test machine
	}
	c, err := New(s)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// replicas returns n Clusters on r sharing settings s, named r0…, each
// having beaten once, then the first beaten again so all know the count.
func replicas(tb testing.TB, r *redisServer, n int, s Settings) []*Cluster {
	tb.Helper()
	cs := make([]*Cluster, n)
	for i := range cs {
		s := s
		s.ReplicaID = "r" + strconv.Itoa(i)
		cs[i] = newCluster(tb, r, s)
	}
	for _, c := range append(cs, cs...) {
		if err := c.Beat(tb.Context()); err != nil {
			tb.Fatalf("Beat: %v", err)
		}
	}
	return cs
}

// fakeClock is a clock tests move by hand; Settings.Now of every replica in
// a test reads the same one.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_800_000_000, 0)} }

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = f.t.Add(d)
}
