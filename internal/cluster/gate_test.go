package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
)

// newGates returns n Gates on r, one per replica (r0…), each with limits,
// classes and models; every replica
// has beaten twice, so all know the count. Each Cluster's OnChange reshares
// its Gate on a switch to local mode, as the wiring does; DownAfter is 1.
func newGates(t *testing.T, r *redisServer, n int, clock *fakeClock, limits breaker.LimiterSettings,
	keyed map[string]breaker.LimiterSettings) []*Gate {
	t.Helper()
	gates := make([]*Gate, n)
	cs := make([]*Cluster, n)
	for i := range cs {
		cs[i] = newCluster(t, r, Settings{ReplicaID: "r" + strconv.Itoa(i), Now: clock.Now, DownAfter: 1,
			OnChange: func(up bool) {
				if !up {
					gates[i].Reshare()
				}
			}})
		g, err := cs[i].NewGate(GateSettings{Limits: limits})
		if err != nil {
			t.Fatal(err)
		}
		if err := g.SetKeyed(keyed, keyed); err != nil {
			t.Fatal(err)
		}
		gates[i] = g
	}
	for _, c := range append(cs, cs...) {
		if err := c.Beat(t.Context()); err != nil {
			t.Fatalf("Beat: %v", err)
		}
	}
	return gates
}

// TestGateFallback: three replicas share each bucket through Redis (the
// first replica can take all of it); with Redis stopped each
// decides alone at its share, a third (the class and model buckets too),
// and a refusal says when to come back.
func TestGateFallback(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	clock := newFakeClock()
	ls := breaker.LimiterSettings{QPS: 0.5, Burst: 3, Now: clock.Now} // a token every 2 s; 6 s at a third
	gates := newGates(t, r, 3, clock, ls, map[string]breaker.LimiterSettings{"batch": ls})
	ctx := t.Context()
	tests := []struct {
		name string
		try  func(g *Gate) error
	}{
		{"fast breaker", func(g *Gate) error { return g.Allow(ctx, "") }},
		{"class", func(g *Gate) error { return g.Classes().Allow(ctx, "batch") }},
		{"model", func(g *Gate) error { return g.Models().Allow(ctx, "batch") }},
	}
	// phase tries each row three times per replica, one replica after the
	// other, and checks who was admitted and the Retry-After of the buckets.
	phase := func(mode string, want []int, retry time.Duration) {
		t.Helper()
		for _, tt := range tests {
			got := make([]int, len(gates))
			for i, g := range gates {
				for range 3 {
					err := tt.try(g)
					if err == nil {
						got[i]++
						continue
					}
					var ra interface{ RetryAfter() time.Duration }
					if !errors.As(err, &ra) || ra.RetryAfter() != retry {
						t.Errorf("%s, %s: refused with %v, want RetryAfter %v", mode, tt.name, err, retry)
					}
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s, %s: admitted %v per replica, want %v", mode, tt.name, got, want)
			}
		}
	}
	phase("shared", []int{3, 0, 0}, 2*time.Second)
	r.stop()
	for _, g := range gates {
		if err := g.c.Beat(ctx); !errors.Is(err, errUnavailable) || g.c.Up() {
			t.Fatalf("Beat() with Redis stopped = %v, Up() = %v; want ErrUnavailable, false", err, g.c.Up())
		}
	}
	phase("local", []int{1, 1, 1}, 6*time.Second)
}

// TestGateKeys: what reaches Redis is the SHA-256 of every key, the class
// and model buckets under their own prefix (a class and a model of one name
// do not share a bucket), and a key without a bucket passes.
func TestGateKeys(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	clock := newFakeClock()
	one := breaker.LimiterSettings{QPS: 0.001, Burst: 1, Now: clock.Now}
	g := newGates(t, r, 1, clock, breaker.LimiterSettings{ClientQPS: 0.001, ClientBurst: 1, Now: clock.Now},
		map[string]breaker.LimiterSettings{"batch": one})[0]
	rc := r.client()
	hash := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	prefix := g.c.s.KeyPrefix + "rate:client:"
	tests := []struct {
		name    string
		allow   func(ctx context.Context, key string) error
		key     string
		refused bool
		redis   string // the bucket's key in Redis, without the prefix; "" for none
	}{
		{"client", g.Allow, "alice", false, hash("alice")},
		{"client again", g.Allow, "alice", true, hash("alice")},
		{"class", g.Classes().Allow, "batch", false, "class:" + hash("batch")},
		{"model of the class's name", g.Models().Allow, "batch", false, "model:" + hash("batch")},
		{"class again", g.Classes().Allow, "batch", true, "class:" + hash("batch")},
		{"class without a bucket", g.Classes().Allow, "interactive", false, ""},
		{"model without a bucket", g.Models().Allow, "m", false, ""},
	}
	for _, tt := range tests {
		if err := tt.allow(t.Context(), tt.key); (err != nil) != tt.refused {
			t.Errorf("%s: Allow(%q) = %v, want refused %v", tt.name, tt.key, err, tt.refused)
		}
		if tt.redis == "" {
			continue
		}
		if n, err := rc.Exists(t.Context(), prefix+tt.redis).Result(); err != nil || n != 1 {
			t.Errorf("%s: EXISTS %s = %d, %v, want 1", tt.name, prefix+tt.redis, n, err)
		}
	}
	keys, err := rc.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.Contains(k, "alice") || strings.Contains(k, "batch") || strings.Contains(k, "interactive") {
			t.Errorf("Redis holds key %q, a raw client, class or model name", k)
		}
	}
}

// TestGateSettingsInvalid: NewGate, Update and SetKeyed name the invalid
// field and change nothing.
func TestGateSettingsInvalid(t *testing.T) {
	t.Parallel()
	c, err := New(Settings{URL: "redis://127.0.0.1:1/0"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bad := breaker.LimiterSettings{QPS: -1}
	if _, err := c.NewGate(GateSettings{Limits: bad}); err == nil || !strings.Contains(err.Error(), "QPS") {
		t.Errorf("NewGate(QPS -1) = %v, want an error naming QPS", err)
	}
	g, err := c.NewGate(GateSettings{Limits: breaker.LimiterSettings{QPS: 1, Burst: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Update(bad); err == nil || !strings.Contains(err.Error(), "QPS") {
		t.Errorf("Update(QPS -1) = %v, want an error naming QPS", err)
	}
	if err := g.SetKeyed(map[string]breaker.LimiterSettings{"a": bad}, nil); err == nil {
		t.Error("SetKeyed(QPS -1) = nil, want an error")
	}
	// Local mode from the start: the old limits still decide, one token.
	if err := g.Allow(t.Context(), ""); err != nil {
		t.Fatalf("Allow() = %v, want nil", err)
	}
	if err := g.Allow(t.Context(), ""); err == nil {
		t.Fatal("second Allow() = nil, want refused at burst 1")
	}
	if err := g.Classes().Allow(t.Context(), "a"); err != nil {
		t.Fatalf("Classes().Allow(a) = %v after a refused SetKeyed, want nil (no bucket)", err)
	}
}

// TestGateConcurrent hammers every request-path method (and the pods'
// declarations) while reloads and switches to local mode run (Redis unreachable: every decision local); the
// race detector does the checking.
func TestGateConcurrent(t *testing.T) {
	t.Parallel()
	c, err := New(Settings{URL: "redis://127.0.0.1:1/0", Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ls := breaker.LimiterSettings{QPS: 1000, Burst: 100, ClientQPS: 100, ClientBurst: 10}
	g, err := c.NewGate(GateSettings{Limits: ls})
	if err != nil {
		t.Fatal(err)
	}
	keyed := map[string]breaker.LimiterSettings{"a": {QPS: 10, Burst: 5}}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			key := strconv.Itoa(i)
			for ctx.Err() == nil {
				_ = g.Allow(ctx, key)
				_ = g.Classes().Allow(ctx, "a")
				_ = g.Models().Allow(ctx, "a")
				c.SetPods(map[string]int{"p": 4 + i})
				_, _, _ = c.Scale("p", 4, 100, 100)
			}
		})
	}
	for i := range 200 {
		ls.Burst = 50 + i%50
		if err := g.Update(ls); err != nil {
			t.Fatal(err)
		}
		if err := g.SetKeyed(keyed, keyed); err != nil {
			t.Fatal(err)
		}
		g.Reshare()
	}
	cancel()
	wg.Wait()
}
