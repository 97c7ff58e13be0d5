package cluster

import (
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLimiterSteps walks the GCRA through a step table on a fake clock, one
// replica: burst, refusals with their wait, the client bucket before the
// global one, and that a refusal takes no token from either bucket.
func TestLimiterSteps(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	clock := newFakeClock()
	c := replicas(t, r, 1, Settings{Now: clock.Now})[0]
	l, err := c.newLimiter(limiterSettings{qps: 2, burst: 2, clientQPS: 1, clientBurst: 1})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		advance time.Duration
		key     string
		want    decision
	}{
		{"first of a", 0, "a", decision{allowed: true}},
		{"a again: client empty", 0, "a", decision{client: true, wait: time.Second}},
		{"b takes the second global token", 0, "b", decision{allowed: true}},
		{"c: global empty", 0, "c", decision{wait: 500 * time.Millisecond}},
		{"no key: global empty", 0, "", decision{wait: 500 * time.Millisecond}},
		{"c after a global token: its client bucket was not charged", 500 * time.Millisecond, "c", decision{allowed: true}},
		{"a: client still empty", 0, "a", decision{client: true, wait: 500 * time.Millisecond}},
		{"d: global empty again", 0, "d", decision{wait: 500 * time.Millisecond}},
		{"a after refill of both", 500 * time.Millisecond, "a", decision{allowed: true}},
		{"idle: full burst back", 10 * time.Second, "", decision{allowed: true}},
		{"second of the burst", 0, "", decision{allowed: true}},
		{"burst spent", 0, "", decision{wait: 500 * time.Millisecond}},
	}
	for _, tt := range tests {
		clock.Advance(tt.advance)
		got, err := l.Allow(t.Context(), tt.key)
		if err != nil || got != tt.want {
			t.Fatalf("%s: Allow(%q) = %+v, %v, want %+v, nil", tt.name, tt.key, got, err, tt.want)
		}
	}
}

// TestLimiterUnlimited: no bucket, no Redis call, even in local mode.
func TestLimiterUnlimited(t *testing.T) {
	t.Parallel()
	c, err := New(Settings{URL: "redis://127.0.0.1:1/0"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.newLimiter(limiterSettings{clientQPS: 0})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := l.Allow(t.Context(), "a"); err != nil || !d.allowed {
		t.Fatalf("Allow() = %+v, %v, want allowed", d, err)
	}
	if err := l.Update(limiterSettings{qps: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allow(t.Context(), "a"); !errors.Is(err, errUnavailable) {
		t.Fatalf("Allow() in local mode = %v, want ErrUnavailable", err)
	}
	if _, err := l.Allow(t.Context(), strings.Repeat("k", maxClientKey+1)); err == nil || errors.Is(err, errUnavailable) {
		t.Fatalf("Allow(long key) = %v, want an error", err)
	}
}

func TestLimiterSettingsInvalid(t *testing.T) {
	t.Parallel()
	c, err := New(Settings{URL: "redis://127.0.0.1:1/0"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.newLimiter(limiterSettings{qps: -1, burst: -1, clientQPS: math.NaN(), clientBurst: -2})
	for _, field := range []string{"QPS", "Burst", "ClientQPS", "ClientBurst"} {
		if err == nil || !strings.Contains(err.Error(), "LimiterSettings."+field+" =") {
			t.Errorf("NewLimiter() = %v, want it to name %s", err, field)
		}
	}
}

// TestLimiterSharedFakeClock: three replicas take turns on one global bucket
// while a fake clock advances 1 ms per decision; the admitted count is
// exactly rate × elapsed + burst (± 1 for the edge).
func TestLimiterSharedFakeClock(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	clock := newFakeClock()
	cs := replicas(t, r, 3, Settings{Now: clock.Now})
	const qps, burst, decisions = 100, 10, 3000
	var ls []*limiter
	for _, c := range cs {
		l, err := c.newLimiter(limiterSettings{qps: qps, burst: burst})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	admitted := 0
	for i := range decisions {
		d, err := ls[i%3].Allow(t.Context(), "")
		if err != nil {
			t.Fatalf("decision %d: %v", i, err)
		}
		if d.allowed {
			admitted++
		} else if d.wait <= 0 || d.wait > time.Second/qps {
			t.Fatalf("decision %d: refused with Wait %v, want in (0, %v]", i, d.wait, time.Second/qps)
		}
		clock.Advance(time.Millisecond)
	}
	elapsed := time.Duration(decisions-1) * time.Millisecond
	want := burst + int(elapsed.Seconds()*qps)
	if admitted < want-1 || admitted > want+1 {
		t.Fatalf("admitted %d of %d over %v, want %d ± 1", admitted, decisions, elapsed, want)
	}
}

// TestLimiterSharedRealClock: three replicas, four goroutines each, hammer
// one global bucket on Redis's own clock (no Settings.Now) with 100
// decisions per goroutine. The bucket adds one token per 1000 s, so however
// slow the machine none arrives during the run: exactly the burst is
// admitted, and Redis's side agrees: the bucket's TAT is the burst's
// intervals after a first take that Redis's clock places within the run.
// (With a rate that refills during the run, a stall of the test process
// longer than burst ÷ rate let the full bucket drop tokens that the test
// counted as missing admissions; refills over several replicas are
// TestLimiterSharedFakeClock's, on a fake clock.) The burst is at most one
// token per replica, so every batch is a single token used by the decision
// that took it: no batch goes stale with tokens left, however slow.
func TestLimiterSharedRealClock(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	rc := r.client()
	cs := replicas(t, r, 3, Settings{})
	const qps, burst, interval = 0.001, 3, 1000 * time.Second
	var admitted, refused, failed atomic.Int64
	before := r.redisNow(t.Context(), rc)
	var wg sync.WaitGroup
	var ls []*limiter
	for _, c := range cs {
		l, err := c.newLimiter(limiterSettings{qps: qps, burst: burst})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		for range 4 {
			wg.Go(func() {
				for range 100 {
					switch d, err := l.Allow(t.Context(), ""); {
					case err != nil:
						failed.Add(1)
					case d.allowed:
						admitted.Add(1)
					case d.wait <= 0 || d.wait > interval:
						t.Errorf("refused with Wait %v, want in (0, %v]", d.wait, interval)
					default:
						refused.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	after := r.redisNow(t.Context(), rc)
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d decisions failed", n)
	}
	held := 0
	for _, l := range ls {
		held += l.global.tokens
	}
	if got := admitted.Load(); got != burst || held != 0 {
		t.Fatalf("admitted %d (+%d left in batches, %d refused), want exactly the burst, %d", got, held, refused.Load(), burst)
	}
	tat, err := rc.Get(t.Context(), "gatekeeper:rate:global").Int64()
	if err != nil {
		t.Fatalf("GET the bucket: %v", err)
	}
	if first := time.UnixMicro(tat).Add(-burst * interval); first.Before(before) || first.After(after) {
		t.Fatalf("the bucket's TAT is %d intervals after %v, want a first take within the run on Redis's clock: [%v, %v]",
			burst, first, before, after)
	}
}
