package cluster

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatekeeper-dev/gatekeeper/internal/cluster/clustertest"
)

// redisServer is clustertest's server with the reads these tests make.
type redisServer struct {
	*clustertest.Server
	tb testing.TB
}

func startRedis(tb testing.TB) *redisServer {
	tb.Helper()
	return &redisServer{Server: clustertest.StartRedis(tb), tb: tb}
}

func (r *redisServer) url() string { return r.URL() }
func (r *redisServer) start()      { r.Start() }
func (r *redisServer) stop()       { r.Stop() }

// client returns a plain go-redis client for the test's own reads (TIME).
func (r *redisServer) client() *redis.Client {
	r.tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
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
