package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/gatekeeper-dev/gatekeeper/internal/cluster/clustertest"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// faultPolicy: one pod with a window of 10 that no cut moves, memory
// admission on (vocab_size 1000, the whole free memory), a lease time of
// 2 s, a heartbeat of 100 ms and a Redis timeout of 100 ms.
//
// The faults are the ones the test injects. The guarantee holds while no
// replica is frozen longer than lease_ttl/2 and none is cut off longer than
// lease_ttl + ForgetAfter (docs/cluster.md, worst cases); a busy machine
// must not add such faults of its own. Issue 35: with the default timeout
// (5 ms) and a lease time of 1 s, under -race beside two CPU hogs, nearly
// every call through the relay timed out, r0 stayed in local mode for more
// than 7 s, Redis forgot its floor as designed and the pod ran 13 of 10;
// goroutines stalled up to 0.4 s, close to the 0.5 s half lease.
const faultPolicy = `
upstreams: [{name: pod, url: "POD_URL", max_inflight: 10, min_inflight: 10, vocab_size: 1000}]
batch: {memory_share: 1}
health_check: {interval: 1h}
fast_breaker: {qps: 0}
queue: {max_length: 1000, max_wait: 30s, starvation_after: 10s, ttft_deadline: 0s}
cluster: {redis: {url: "REDIS_URL"}, heartbeat: 100ms, lease_ttl: 2s, timeout: 100ms, replica_id: REPLICA}
`

// faultPhase is one stretch of a fault run: what it does to Redis (or to
// the first replica's link to it) at its start, how long it lasts, and what
// undoes it at its end.
type faultPhase struct {
	name       string
	start, end func()
	lasts      time.Duration
	// down lists the replicas that must be in local mode by its end: the
	// fault took effect.
	down []int
}

// TestReplicasUnderRedisFaults: two and three replicas in front of one pod
// with a window of 10, under a steady load of more than the window, while
// Redis is paused (SIGSTOP) for 3 s, killed and restarted empty, kept busy
// by DEBUG SLEEP for 3 s, and while the first replica alone is cut off from
// it for 3 s (a stalled relay); each fault lasts long enough for the leases
// to lapse to their floor and to expire in Redis. In every phase the pod never runs more than
// its window; with memory admission bounding the pod at 6 requests' worth
// (three replicas), never more than 6; every request is answered exactly
// once (served, or refused with Retry-After), and some are served in every
// phase.
func TestReplicasUnderRedisFaults(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas int
		memory   bool
	}{
		{"two replicas, the window binds", 2, false},
		{"three replicas, memory admission binds", 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			faultRun(t, tc.replicas, tc.memory)
		})
	}
}

func faultRun(t *testing.T, n int, memory bool) {
	redis := clustertest.StartRedis(t)
	relay := clustertest.StartRelay(t, redis.Addr())
	pod := newBusyPod(t, 50*time.Millisecond)
	policy := strings.ReplaceAll(faultPolicy, "POD_URL", pod.url)
	urls := []string{relay.URL()}
	for range n - 1 {
		urls = append(urls, redis.URL())
	}
	apps, _ := replicaApps(t, n, policy, urls...)
	bound := 10
	if memory { // 192 000 bytes free ÷ vocab 1000 = 192; a request's estimate is 32: six at once
		bound = 6
		for _, a := range apps {
			a.slow.Observe(pressure.State{At: time.Now(), Upstreams: []pressure.UpstreamState{{Name: "pod",
				Signals: map[pressure.Signal]pressure.Value{pressure.FreeMemory: {Value: 192000, At: time.Now()}}}}})
		}
	}
	slept := make(chan error, 1)
	debugSleep := func() { // Redis busy 3 s; the phase ends (and checks) at 2.5 s
		go func() {
			rc := goredis.NewClient(&goredis.Options{Addr: redis.Addr(), ReadTimeout: 10 * time.Second})
			defer rc.Close()
			slept <- rc.Do(context.Background(), "DEBUG", "SLEEP", "3").Err()
		}()
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	phases := []faultPhase{
		{name: "steady", lasts: time.Second},
		{name: "Redis paused (SIGSTOP) 3 s", start: redis.Pause, end: redis.Resume, lasts: 3 * time.Second, down: all},
		{name: "after the pause", lasts: 1500 * time.Millisecond},
		{name: "Redis killed (SIGKILL) 1.5 s", start: redis.Kill, end: redis.Start, lasts: 1500 * time.Millisecond, down: all},
		{name: "restarted empty", lasts: 2500 * time.Millisecond},
		{name: "DEBUG SLEEP 3", start: debugSleep, lasts: 2500 * time.Millisecond, down: all},
		{name: "after the sleep", lasts: 1500 * time.Millisecond},
		{name: "r0 cut off 3 s (stalled relay)", start: relay.Stall, end: relay.Resume, lasts: 3 * time.Second, down: []int{0}},
		{name: "after the cut", lasts: 1500 * time.Millisecond},
	}

	var sent, answered atomic.Int64
	var mu sync.Mutex
	served := make([]int, len(phases))
	statuses := map[int]int{}
	var phase atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 8 * n { // 8 clients per replica: more than the window
		a := apps[i%n]
		wg.Go(func() {
			for range 100000 { // bounded; stop ends it first
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(1)
				rec := httptest.NewRecorder()
				a.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions",
					strings.NewReader(`{"model":"m","prompt":"x","max_tokens":4}`)))
				answered.Add(1)
				mu.Lock()
				statuses[rec.Code]++
				if rec.Code == http.StatusOK {
					served[phase.Load()]++
				} else if rec.Header().Get("Retry-After") == "" {
					t.Errorf("%d without Retry-After: %s", rec.Code, rec.Body)
				}
				mu.Unlock()
			}
		})
	}
	bounds := make([]time.Time, len(phases)+1)
	for i, p := range phases {
		bounds[i] = time.Now()
		phase.Store(int64(i))
		if p.start != nil {
			p.start()
		}
		time.Sleep(p.lasts) // the phase's length, not a wait for state
		for _, r := range p.down {
			if apps[r].shared.Cluster().Up() {
				t.Errorf("%s: r%d still in shared mode at its end", p.name, r)
			}
		}
		if p.end != nil {
			p.end()
		}
	}
	bounds[len(phases)] = time.Now()
	close(stop)
	wg.Wait()
	if err := <-slept; err != nil {
		t.Errorf("DEBUG SLEEP: %v", err)
	}

	for i, p := range phases {
		peak := pod.maxBetween(bounds[i], bounds[i+1])
		t.Logf("%-32s served %4d, the pod at most %d at once (bound %d)", p.name, served[i], peak, bound)
		if peak > bound {
			t.Errorf("%s: the pod ran %d at once, above its bound of %d", p.name, peak, bound)
		}
		if served[i] == 0 {
			t.Errorf("%s: nothing served", p.name)
		}
	}
	outcomes := 0
	for _, a := range apps {
		for _, c := range outcomeCounts(t, a) {
			outcomes += c
		}
	}
	if sent.Load() != answered.Load() || int64(outcomes) != sent.Load() {
		t.Errorf("sent %d, answered %d, outcomes counted %d: want one answer and one outcome each",
			sent.Load(), answered.Load(), outcomes)
	}
	t.Logf("statuses %v over %d requests", statuses, sent.Load())
}

// maxBetween is the most requests the pod ran at once between from and to
// (what ran at from included).
func (p *busyPod) maxBetween(from, to time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	peak, cur := 0, 0
	for _, c := range p.changes {
		if c.at.After(to) {
			break
		}
		cur = c.inflight
		if !c.at.Before(from) || peak == 0 {
			peak = max(peak, cur)
		}
	}
	return peak
}
