package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/quota"
)

// newQuotaReplicas returns n Quotas on r, one per replica (r0…) with the
// settings s on s.Now's clock, with limits set before the first heartbeat
// (so at a share of 1) and then two heartbeats each, so all know the
// count.
func newQuotaReplicas(t *testing.T, r *redisServer, n int, s Settings, limits quota.Limits) []*Quotas {
	t.Helper()
	qs := make([]*Quotas, n)
	for i := range qs {
		s.ReplicaID = "r" + strconv.Itoa(i)
		c := newCluster(t, r, s)
		local, err := quota.New(quota.Settings{Now: s.Now})
		if err != nil {
			t.Fatal(err)
		}
		qs[i] = c.NewQuotas(local)
		if err := qs[i].SetLimits(limits); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		for _, q := range qs {
			if err := q.c.Beat(t.Context()); err != nil {
				t.Fatalf("Beat: %v", err)
			}
		}
	}
	return qs
}

// checkCharge charges a on q and checks the refusal, want (nil:
// admitted); it returns the Settler.
func checkCharge(t *testing.T, row string, q *Quotas, a quota.Ask, want *quota.ExceededError) quota.Settler {
	t.Helper()
	s, err := q.Charge(t.Context(), a)
	if s == nil {
		t.Fatalf("%s: Charge(%+v) returned a nil Settler", row, a)
	}
	var got *quota.ExceededError
	switch {
	case want == nil && err != nil:
		t.Errorf("%s: Charge(%+v) = %v, want admitted", row, a, err)
	case want != nil && (!errors.As(err, &got) || *got != *want):
		t.Errorf("%s: Charge(%+v) = %v, want %+v", row, a, err, *want)
	}
	return s
}

// TestQuotasShared walks two replicas through a step table on one quota
// in Redis: together they admit the quota and no more, a settle on one
// makes room for the other, the window slides on Redis's (here the fake)
// clock, and Redis holds only hashed names, expiring with their window.
func TestQuotasShared(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	clock := newFakeClock() // on a 10-minute boundary
	qs := newQuotaReplicas(t, r, 2, Settings{Now: clock.Now, DownAfter: 1}, quota.Limits{
		PerClient: quota.Limit{PerDay: 5000},
		Classes:   map[string]quota.Limit{"batch": {PerMinute: 1000}},
	})
	refused := func(used, charge int64, wait time.Duration) *quota.ExceededError {
		return &quota.ExceededError{Kind: "class", Name: "batch", Window: quota.Minute, Limit: 1000, Used: used, Charge: charge, Wait: wait}
	}
	ask := func(est int64) quota.Ask { return quota.Ask{Client: "alice", Class: "batch", Estimate: est} }
	var first quota.Settler
	for i := range 10 { // 10 × 100 from both replicas, in turn
		s := checkCharge(t, "fill "+strconv.Itoa(i), qs[i%2], ask(100), nil)
		if i == 0 {
			first = s
		}
	}
	checkCharge(t, "full on r0", qs[0], ask(100), refused(1000, 100, 61*time.Second))
	checkCharge(t, "full on r1", qs[1], ask(1), refused(1000, 1, 61*time.Second))
	first.Settle(20) // r0's first charge used 20: 80 back, for either replica
	checkCharge(t, "r1 takes the refund", qs[1], ask(80), nil)
	checkCharge(t, "full again", qs[1], ask(1), refused(1000, 1, 61*time.Second))
	first.Settle(0) // a no-op
	clock.Advance(30 * time.Second)
	checkCharge(t, "an excess counts", qs[0], ask(1000), refused(1000, 1000, 31*time.Second))
	clock.Advance(31 * time.Second)
	s := checkCharge(t, "the minute slid: clamped to the limit", qs[0], ask(3000), nil)
	s.Settle(1200)
	checkCharge(t, "the excess counts against r1", qs[1], ask(0), refused(1200, 0, 61*time.Second))
	checkCharge(t, "the client's day: 1000 + 1000 + 3000 charged, 1200 used", qs[1],
		quota.Ask{Client: "alice", Estimate: 3000}, &quota.ExceededError{Kind: "client", Name: quota.ClientName("alice")[:19],
			Window: quota.Day, Limit: 5000, Used: 2200, Charge: 3000, Wait: 24*time.Hour + 10*time.Minute - 61*time.Second})

	rc := r.client()
	keys, err := rc.Keys(t.Context(), "*quota:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	hash := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	want := map[string]time.Duration{
		"class:" + hash("batch") + ":minute": 61 * time.Second, "class:" + hash("batch") + ":day": 24*time.Hour + 10*time.Minute,
		"client:" + hash("alice") + ":minute": 61 * time.Second, "client:" + hash("alice") + ":day": 24*time.Hour + 10*time.Minute,
	}
	if len(keys) != len(want) {
		t.Errorf("Redis holds %v, want the %d keys of %v", keys, len(want), want)
	}
	for k, most := range want {
		ttl, err := rc.PTTL(t.Context(), defaultKeyPrefix+"quota:"+k).Result()
		if err != nil || ttl <= 0 || ttl > most {
			t.Errorf("PTTL %squota:%s = %v, %v, want in (0, %v]", defaultKeyPrefix, k, ttl, err, most)
		}
	}
	for _, k := range keys {
		if strings.Contains(k, "alice") || strings.Contains(k, "batch") {
			t.Errorf("Redis holds key %q, a raw client or class name", k)
		}
	}
}

// TestQuotasConcurrent: two replicas, eight goroutines each, charge one
// quota until it refuses; together they admit exactly the quota.
func TestQuotasConcurrent(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	clock := newFakeClock()
	const limit, est = 5000, 100
	qs := newQuotaReplicas(t, r, 2, Settings{Now: clock.Now, DownAfter: 1 << 30}, quota.Limits{Models: map[string]quota.Limit{"m": {PerMinute: limit}}})
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for {
				s, err := qs[i%2].Charge(t.Context(), quota.Ask{Model: "m", Estimate: est})
				if err != nil {
					if !errors.Is(err, quota.ErrExceeded) {
						t.Errorf("Charge() = %v, want admitted or ErrExceeded", err)
					}
					return
				}
				s.Settle(est)
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if admitted != limit/est {
		t.Errorf("the replicas admitted %d of %d tokens, want %d", admitted, est, limit/est)
	}
}

// TestQuotasFallback: with Redis stopped each replica decides alone at its
// share (the most replicas seen: 2, re-applied to the limits set before
// the first heartbeat), counting what it charged in Redis before; a settle
// of a Redis charge while Redis is gone trues up the local copy only; with
// Redis back (empty) the replicas share again.
func TestQuotasFallback(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	clock := newFakeClock()
	qs := newQuotaReplicas(t, r, 2, Settings{Now: clock.Now, DownAfter: 1}, quota.Limits{PerClient: quota.Limit{PerMinute: 1000}})
	ask := func(est int64) quota.Ask { return quota.Ask{Client: "alice", Estimate: est} }
	share := func(used, charge int64) *quota.ExceededError {
		return &quota.ExceededError{Kind: "client", Name: quota.ClientName("alice")[:19], Window: quota.Minute,
			Limit: 500, Used: used, Charge: charge, Wait: 61 * time.Second}
	}
	var early quota.Settler
	for i := range 3 {
		early = checkCharge(t, "shared "+strconv.Itoa(i), qs[0], ask(100), nil)
	}
	r.stop()
	for _, q := range qs {
		if err := q.c.Beat(t.Context()); !errors.Is(err, errUnavailable) || q.c.Up() {
			t.Fatalf("Beat() with Redis stopped = %v, Up() = %v; want ErrUnavailable, false", err, q.c.Up())
		}
	}
	checkCharge(t, "r0 local: 300 of its 500 charged already", qs[0], ask(200), nil)
	checkCharge(t, "r0 at its share", qs[0], ask(1), share(500, 1))
	for i := range 5 {
		checkCharge(t, "r1 local "+strconv.Itoa(i), qs[1], ask(100), nil)
	}
	checkCharge(t, "r1 at its share", qs[1], ask(1), share(500, 1))
	early.Settle(0) // a Redis charge settled without Redis: r0's copy gives 100 back
	checkCharge(t, "r0 has the refund", qs[0], ask(100), nil)
	checkCharge(t, "r0 full again", qs[0], ask(1), share(500, 1))

	r.start() // empty: nothing persisted
	for _, q := range qs {
		if err := q.c.Beat(t.Context()); err != nil || !q.c.Up() {
			t.Fatalf("Beat() with Redis back = %v, Up() = %v; want nil, true", err, q.c.Up())
		}
	}
	for i := range 10 {
		checkCharge(t, "shared again "+strconv.Itoa(i), qs[i%2], ask(100), nil)
	}
	checkCharge(t, "the whole quota", qs[1], ask(1), &quota.ExceededError{Kind: "client", Name: quota.ClientName("alice")[:19],
		Window: quota.Minute, Limit: 1000, Used: 1000, Charge: 1, Wait: 61 * time.Second})
}

// TestQuotasCallFails: a call that times out (Redis paused) is decided
// locally at the share at once, though the Cluster stays in shared mode
// (DownAfter not reached); Redis's answer to the next call counts again.
func TestQuotasCallFails(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	clock := newFakeClock()
	qs := newQuotaReplicas(t, r, 2, Settings{Now: clock.Now, DownAfter: 100, Timeout: 200 * time.Millisecond},
		quota.Limits{Classes: map[string]quota.Limit{"batch": {PerMinute: 1000}}})
	q := qs[0]
	ask := func(est int64) quota.Ask { return quota.Ask{Class: "batch", Estimate: est} }
	checkCharge(t, "shared", q, ask(400), nil)
	r.Pause()
	start := time.Now()
	checkCharge(t, "Redis paused: r0's share, 400 charged already", q, ask(200), &quota.ExceededError{Kind: "class", Name: "batch",
		Window: quota.Minute, Limit: 500, Used: 400, Charge: 200, Wait: 61 * time.Second})
	if took := time.Since(start); took > 2*time.Second || !q.c.Up() {
		t.Errorf("a timed-out charge took %v, Up() = %v; want about the 200ms timeout, true", took, q.c.Up())
	}
	r.Resume()
	checkCharge(t, "Redis back: the whole quota", q, ask(200), nil)
}

// TestQuotasSetLimitsInvalid: SetLimits names the invalid field and
// changes nothing; with no quota that applies nothing reaches Redis.
func TestQuotasSetLimitsInvalid(t *testing.T) {
	t.Parallel()
	c, err := New(Settings{URL: "redis://127.0.0.1:1/0", Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	local, err := quota.New(quota.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	q := c.NewQuotas(local)
	if err := q.SetLimits(quota.Limits{Models: map[string]quota.Limit{"m": {PerMinute: 10}}}); err != nil {
		t.Fatal(err)
	}
	if err := q.SetLimits(quota.Limits{Models: map[string]quota.Limit{"m": {PerMinute: -1}}}); err == nil ||
		!strings.Contains(err.Error(), `Limits.Models["m"].PerMinute = -1`) {
		t.Errorf("SetLimits(PerMinute -1) = %v, want an error naming the field", err)
	}
	// Local mode from the start: the old quota at a share of 2 still decides.
	if _, err := q.Charge(t.Context(), quota.Ask{Model: "m", Estimate: 5}); err != nil {
		t.Fatalf("Charge(5) = %v, want admitted", err)
	}
	if _, err := q.Charge(t.Context(), quota.Ask{Model: "m", Estimate: 1}); !errors.Is(err, quota.ErrExceeded) {
		t.Fatalf("Charge(1) = %v, want ErrExceeded at a share of 5", err)
	}
	if s, err := q.Charge(t.Context(), quota.Ask{Model: "other", Estimate: 1 << 40}); err != nil || s == nil {
		t.Fatalf("Charge(a model without a quota) = %v, %v; want a Settler, nil", s, err)
	}
}
