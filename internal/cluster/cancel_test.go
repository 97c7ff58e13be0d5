package cluster

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/cluster/clustertest"
	"github.com/gatekeeper-dev/gatekeeper/internal/quota"
)

// TestCallEndsWithCaller: each Redis call on the request path (the fast
// breaker, a class's and a model's bucket, a quota charge) ends as soon as
// its caller's context is cancelled, while Redis has not answered (a relay
// in front of it holds the call), long before Settings.Timeout; the request
// is decided locally, and the cancellation is no Redis failure: with
// DownAfter 1 the replica stays in shared mode and OnChange is not called.
// The last row is the control: the same call with a context that does not
// end times out, and that one failure puts the replica in local mode.
func TestCallEndsWithCaller(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	relay := clustertest.StartRelay(t, r.Addr())
	var mu sync.Mutex
	var changes []bool
	c, err := New(Settings{URL: relay.URL(), ReplicaID: "r0", Timeout: maxTimeout, DownAfter: 1,
		OnChange: func(up bool) { mu.Lock(); changes = append(changes, up); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	g, err := c.NewGate(GateSettings{Limits: breaker.LimiterSettings{ClientQPS: 1, ClientBurst: 5}})
	if err != nil {
		t.Fatal(err)
	}
	one := map[string]breaker.LimiterSettings{"batch": {QPS: 1, Burst: 5}, "m": {QPS: 1, Burst: 5}}
	if err := g.SetKeyed(one, one); err != nil {
		t.Fatal(err)
	}
	local, err := quota.New(quota.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	q := c.NewQuotas(local)
	if err := q.SetLimits(quota.Limits{Classes: map[string]quota.Limit{"batch": {PerMinute: 1000}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Beat(t.Context()); err != nil {
		t.Fatalf("Beat: %v", err)
	}
	upChanges := func() []bool {
		mu.Lock()
		defer mu.Unlock()
		return append([]bool(nil), changes...)
	}
	if got := upChanges(); len(got) != 1 || !got[0] {
		t.Fatalf("OnChange calls after the first beat = %v, want [true]", got)
	}
	tests := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"fast breaker", func(ctx context.Context) error { return g.Allow(ctx, "alice") }},
		{"class", func(ctx context.Context) error { return g.Classes().Allow(ctx, "batch") }},
		{"model", func(ctx context.Context) error { return g.Models().Allow(ctx, "m") }},
		{"quota charge", func(ctx context.Context) error {
			_, err := q.Charge(ctx, quota.Ask{Class: "batch", Estimate: 10})
			return err
		}},
	}
	for _, tt := range tests {
		relay.Stall()
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- tt.call(ctx) }()
		<-relay.Held() // the call reached the relay: it waits for Redis's answer
		cancel()
		err := <-done
		took := time.Since(start)
		relay.Resume()
		if err != nil {
			t.Errorf("%s: cancelled call = %v, want nil (decided locally: every local bucket is full)", tt.name, err)
		}
		if took >= maxTimeout {
			t.Errorf("%s: cancelled call took %v, want less than the %v timeout", tt.name, took, maxTimeout)
		}
		if !c.Up() || c.failures.Load() != 0 {
			t.Errorf("%s: after the cancel Up() = %v, failures = %d; want true, 0 (a client that left is no Redis failure)",
				tt.name, c.Up(), c.failures.Load())
		}
	}
	if got := upChanges(); len(got) != 1 {
		t.Errorf("OnChange calls after the cancelled calls = %v, want only the first beat's [true]", got)
	}

	// Control: the same held call, its context live, times out, and that
	// one failure (DownAfter 1) puts the replica in local mode.
	relay.Stall()
	start := time.Now()
	err = g.Allow(t.Context(), "bob")
	took := time.Since(start)
	relay.Resume()
	if err != nil || took < maxTimeout || c.Up() {
		t.Errorf("control: held call with a live context = %v after %v, Up() = %v; want nil (local) after the %v timeout, false",
			err, took, c.Up(), maxTimeout)
	}
	if got := upChanges(); len(got) != 2 || got[1] {
		t.Errorf("OnChange calls after the control = %v, want [true false]", got)
	}
}

// TestQuotaSettleAfterClientLeft: a charge's refund runs after its
// request's context was cancelled (the client left) and still reaches
// Redis: the room comes back for the next charge, which Redis decides.
func TestQuotaSettleAfterClientLeft(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	clock := newFakeClock()
	q := newQuotaReplicas(t, r, 1, Settings{Now: clock.Now, DownAfter: 1},
		quota.Limits{Classes: map[string]quota.Limit{"batch": {PerMinute: 100}}})[0]
	ask := quota.Ask{Class: "batch", Estimate: 100}
	ctx, cancel := context.WithCancel(t.Context())
	s, err := q.Charge(ctx, ask)
	if err != nil {
		t.Fatalf("Charge = %v, want admitted", err)
	}
	checkCharge(t, "the quota is used up", q, quota.Ask{Class: "batch", Estimate: 1}, &quota.ExceededError{Kind: "class",
		Name: "batch", Window: quota.Minute, Limit: 100, Used: 100, Charge: 1, Wait: 61 * time.Second})
	cancel() // the client left; the refund comes after
	s.Settle(0)
	checkCharge(t, "refunded in Redis after the client left", q, ask, nil)
	if !q.c.Up() {
		t.Error("Up() = false, want true")
	}
}
