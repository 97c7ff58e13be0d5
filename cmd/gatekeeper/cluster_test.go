package main

import (
	"cmp"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/gatekeeper-dev/gatekeeper/internal/cluster/clustertest"
)

// busyPod is a pod on loopback whose completions take work long; it
// records how many run at once over time.
type busyPod struct {
	url  string
	work time.Duration

	// mu guards the fields below.
	mu       sync.Mutex
	inflight int
	max      int
	arrivals int
	changes  []podChange
}

type podChange struct {
	at       time.Time
	inflight int
	arrival  int // the arrival count then
}

func newBusyPod(t *testing.T, work time.Duration) *busyPod {
	p := &busyPod{work: work}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		p.mu.Lock()
		p.inflight++
		p.arrivals++
		p.max = max(p.max, p.inflight)
		p.changes = append(p.changes, podChange{time.Now(), p.inflight, p.arrivals})
		p.mu.Unlock()
		select { // the engine's work
		case <-time.After(p.work):
		case <-r.Context().Done():
		}
		p.mu.Lock()
		p.inflight--
		p.changes = append(p.changes, podChange{time.Now(), p.inflight, p.arrivals})
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{}`)
	})
	p.url = newPodServer(t, mux)
	return p
}

// meanInflight is the time-weighted number of requests running between the
// arrivals from and to (1-based).
func (p *busyPod) meanInflight(from, to int) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var start, last time.Time
	cur, area := 0, 0.0
	for _, c := range p.changes {
		switch {
		case c.arrival < from:
		case start.IsZero():
			start = c.at
		default:
			area += float64(cur) * c.at.Sub(last).Seconds()
		}
		if c.arrival >= to {
			return area / c.at.Sub(start).Seconds()
		}
		cur, last = c.inflight, c.at
	}
	return 0
}

// quietRedisOnce silences go-redis's global logger once per test binary.
var quietRedisOnce sync.Once

// replicaApps builds n gatekeeper replicas sharing one Redis (its URL is in
// policy, or each replica's own URL from urls when given), runs their
// cluster loops until the test ends, and returns once every replica holds a
// share of each pod's window. The Redis is taken as one that has been up a
// while (its epoch set long ago): a new epoch holds every share at 0 until
// its write-back time and every holder's at its cap for a lease time,
// which TestFreshReplicasServeAtOnce and the restart cases test on
// purpose. Their
// switches between shared and local mode arrive on stages.
func replicaApps(t testing.TB, n int, policy string, urls ...string) (apps []*app, stages chan string) {
	t.Helper()
	stages = make(chan string, 1024)
	quietRedisOnce.Do(func() { goredis.SetLogger(quietRedis{}) }) // as main does
	apps = make([]*app, n)
	for i := range apps {
		p := strings.ReplaceAll(policy, "REPLICA", "r"+string(rune('0'+i)))
		if len(urls) > i {
			p = strings.ReplaceAll(p, "REDIS_URL", urls[i])
		}
		a, err := newApp(mustParse(t, p), appOptions{stage: func(name string) {
			if strings.HasPrefix(name, "cluster_") {
				select {
				case stages <- name:
				default: // nobody listens: drop
				}
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		apps[i] = a
	}
	oldEpoch(t, apps[0])
	for range 4 { // the even split of an idle start: a grant given back takes two beats
		for _, a := range apps {
			setupBeat(t, a)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	for _, a := range apps {
		for pod, sh := range a.shared.Cluster().Snapshot().Shares {
			if sh.Cap == 0 {
				t.Fatalf("%s holds nothing of %s after four beats: %+v", a.shared.Cluster().ReplicaID(), pod, sh)
			}
		}
		loops.Go(func() { a.shared.Run(ctx) })
	}
	t.Cleanup(func() { cancel(); loops.Wait() })
	return apps, stages
}

// setupBeat beats until one answers, at most 100 tries: a policy with the
// default 5 ms Redis timeout meets timeouts on a loaded machine, which the
// cluster survives (the fault tests show it) but a setup step must not
// mistake for a failure.
func setupBeat(t testing.TB, a *app) {
	t.Helper()
	var err error
	for range 100 {
		if err = a.shared.Cluster().Beat(t.Context()); err == nil {
			return
		}
	}
	t.Fatalf("Beat: 100 tries failed, the last with %v", err)
}

// oldEpoch marks a's Redis as up for long: no warm-up.
func oldEpoch(t testing.TB, a *app) {
	t.Helper()
	opt, err := goredis.ParseURL(a.cfg().Cluster.Redis.URL)
	if err != nil {
		t.Fatal(err)
	}
	rc := goredis.NewClient(opt)
	defer rc.Close()
	prefix := cmp.Or(a.cfg().Cluster.KeyPrefix, "gatekeeper:")
	if err := rc.Set(t.Context(), prefix+"epoch", "0", 0).Err(); err != nil {
		t.Fatal(err)
	}
}

func clusterPolicy(redis *clustertest.Server, podURL, extra string) string {
	return `
upstreams: [{name: pod, url: "` + podURL + `", max_inflight: 20, min_inflight: 20}]
health_check: {interval: 1h}
queue: {max_length: 1000, max_wait: 60s, starvation_after: 30s, ttft_deadline: 0s} # every request waits its turn
cluster: {redis: {url: "` + redis.URL() + `"}, timeout: 500ms, heartbeat: 200ms, lease_ttl: 2s, replica_id: REPLICA}
` + extra
}

// TestReplicasShareTheWindow: three replicas in front of one pod with a
// window of 20 and 200 concurrent long requests spread over them: the pod
// never runs more than 20 at once, and runs at least 18 on average while
// work is queued (the shared window is used, not wasted).
func TestReplicasShareTheWindow(t *testing.T) {
	t.Parallel()
	redis := clustertest.StartRedis(t)
	// Long beside the heartbeat (200 ms), so the shares have moved to the
	// demand well before the queue empties.
	pod := newBusyPod(t, 800*time.Millisecond)
	apps, _ := replicaApps(t, 3, clusterPolicy(redis, pod.url, "fast_breaker: {qps: 0}\n"))
	var wg sync.WaitGroup
	codes := make([]int, 200)
	for i := range 200 {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			apps[i%3].handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions",
				strings.NewReader(`{"model":"m","prompt":"x","max_tokens":4}`)))
			codes[i] = rec.Code
		})
	}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Fatalf("request %d = %d, want 200", i, c)
		}
	}
	if pod.max > 20 {
		t.Fatalf("the pod ran %d at once, want ≤ 20 over three replicas", pod.max)
	}
	if m := pod.meanInflight(21, 180); m < 18 {
		t.Errorf("the pod ran %.1f on average while work was queued, want ≥ 18", m)
	}
	t.Logf("pod: at most %d at once, %.1f on average while queued", pod.max, pod.meanInflight(21, 180))
}

// TestReplicasShareTheRate: a global limit with a burst of 5 and one token
// per 1000 s, over three replicas: 60 requests spread over them at once
// admit exactly the burst, not 5 per replica; every refusal is a 429 whose
// Retry-After is the global bucket's interval (1000 s; a bucket per replica
// at its share would say 3000 s, an unshared rate 334 s); and in Redis the
// one global bucket advanced by exactly one interval per admitted request.
//
// The interval is long beside any run so that the bucket's clock (Redis's,
// which a test cannot drive through newApp) adds no token during the test,
// however slow the machine: a limit of 20/s measured over 10 s of real time
// counted the tokens a full bucket loses while a loaded machine stalls the
// requests for more than burst ÷ rate (250 ms) as missing admissions.
// Admissions over time on several replicas are TestLimiterSharedFakeClock's
// (internal/cluster), on a fake clock.
func TestReplicasShareTheRate(t *testing.T) {
	t.Parallel()
	const burst, interval, requests = 5, 1000 * time.Second, 60
	redis := clustertest.StartRedis(t)
	pod := newBusyPod(t, 0)
	apps, _ := replicaApps(t, 3, clusterPolicy(redis, pod.url, "fast_breaker: {qps: 0.001, burst: 5}\n"))
	rc := redisClient(t, apps[0])
	before := redisNow(t, rc)
	var mu sync.Mutex
	admitted, refused := 0, 0
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			apps[i%3].handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions",
				strings.NewReader(`{"model":"m","prompt":"x","max_tokens":4}`)))
			mu.Lock()
			defer mu.Unlock()
			switch rec.Code {
			case 200:
				admitted++
			case 429:
				refused++
				// The bucket's next token is due one interval after the
				// first admission: 1000 s less the run's time so far,
				// within 5 % unless the run took 50 s.
				if ra, err := strconv.Atoi(rec.Header().Get("Retry-After")); err != nil || ra < 950 || ra > 1000 {
					t.Errorf("429 with Retry-After %q, want the global interval: 950 to 1000 s", rec.Header().Get("Retry-After"))
				}
			default:
				t.Errorf("request = %d", rec.Code)
			}
		})
	}
	wg.Wait()
	after := redisNow(t, rc)
	if admitted != burst || refused != requests-burst {
		t.Fatalf("admitted %d, refused %d of %d over three replicas, want %d admitted (the burst), the rest refused",
			admitted, refused, requests, burst)
	}
	// Redis's side: the bucket, full when the first request took a token,
	// holds its theoretical arrival time that many intervals later.
	prefix := cmp.Or(apps[0].cfg().Cluster.KeyPrefix, "gatekeeper:")
	tat, err := rc.Get(t.Context(), prefix+"rate:global").Int64()
	if err != nil {
		t.Fatalf("reading the global bucket: %v", err)
	}
	first := time.UnixMicro(tat).Add(-time.Duration(admitted) * interval)
	if first.Before(before) || first.After(after) {
		t.Fatalf("the global bucket's TAT is %d admissions × %v after %v, want its first admission within the run [%v, %v]",
			admitted, interval, first, before, after)
	}
}

// redisClient is a client of a's Redis, closed when the test ends.
func redisClient(t testing.TB, a *app) *goredis.Client {
	t.Helper()
	opt, err := goredis.ParseURL(a.cfg().Cluster.Redis.URL)
	if err != nil {
		t.Fatal(err)
	}
	rc := goredis.NewClient(opt)
	t.Cleanup(func() { rc.Close() })
	return rc
}

// redisNow is Redis's clock, the one its buckets run on.
func redisNow(t testing.TB, rc *goredis.Client) time.Time {
	t.Helper()
	now, err := rc.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// TestRedisOutageEveryRequestAnswered: Redis stopped mid-run and started
// again: every request is answered (served, or 429 with Retry-After), the
// replicas fall back to their share and say so once, and shared mode
// resumes at the next heartbeat.
func TestRedisOutageEveryRequestAnswered(t *testing.T) {
	t.Parallel()
	redis := clustertest.StartRedis(t)
	pod := newBusyPod(t, 20*time.Millisecond)
	apps, stages := replicaApps(t, 3, clusterPolicy(redis, pod.url, "fast_breaker: {qps: 300, burst: 30}\n"))
	send := func(n int) map[int]int {
		codes := map[int]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				rec := httptest.NewRecorder()
				apps[i%3].handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions",
					strings.NewReader(`{"model":"m","prompt":"x","max_tokens":4}`)))
				mu.Lock()
				codes[rec.Code]++
				mu.Unlock()
				if rec.Code != 200 && rec.Header().Get("Retry-After") == "" {
					t.Errorf("%d without Retry-After", rec.Code)
				}
			})
		}
		wg.Wait()
		return codes
	}
	// await takes n switches to stage off stages (each replica's, once).
	await := func(stage string) {
		t.Helper()
		for got := 0; got < len(apps); {
			select {
			case s := <-stages:
				if s == stage {
					got++
				}
			case <-time.After(20 * time.Second): // a bound, not a wait for state
				t.Fatalf("%d of %d replicas reported %s after 20 s", got, len(apps), stage)
			}
		}
	}
	before := send(60)
	redis.Stop()
	during := send(60)
	await("cluster_down") // the heartbeats notice within three beats
	redis.Start()
	// Each replica switches back once (go-redis may refuse dials for about
	// a second after an outage).
	await("cluster_up")
	after := send(60)
	total := 0
	for _, a := range apps {
		for _, n := range outcomeCounts(t, a) {
			total += n
		}
	}
	if total != 180 || before[200] == 0 || during[200] == 0 || after[200] == 0 || pod.max > 20 {
		t.Fatalf("outcomes %d of 180; before %v, during %v, after %v; pod at most %d", total, before, during, after, pod.max)
	}
	t.Logf("before %v, during the outage %v, after %v", before, during, after)
}

// TestReplicasShareClassAndModelBuckets: a class's and a model's own
// buckets are summed over the replicas too: burst 3 admits 3 in all, not 3
// per replica.
func TestReplicasShareClassAndModelBuckets(t *testing.T) {
	t.Parallel()
	redis := clustertest.StartRedis(t)
	pod := newBusyPod(t, 0)
	apps, _ := replicaApps(t, 3, clusterPolicy(redis, pod.url, `fast_breaker: {qps: 0}
model_limits: {m: {qps: 0.001, burst: 3}}
classes:
  header: X-Class
  default: interactive
  list:
    - {name: interactive, priority: 1}
    - {name: batch, priority: -1, qps: 0.001, burst: 3}
`))
	count := func(model, class string) int {
		admitted := 0
		for i := range 9 {
			req := httptest.NewRequest(http.MethodPost, "/v1/completions",
				strings.NewReader(`{"model":"`+model+`","prompt":"x","max_tokens":4}`))
			req.Header.Set("X-Class", class)
			rec := httptest.NewRecorder()
			apps[i%3].handler.ServeHTTP(rec, req)
			if rec.Code == 200 {
				admitted++
			}
		}
		return admitted
	}
	if n := count("other", "batch"); n != 3 {
		t.Errorf("class batch admitted %d over three replicas, want 3 (its burst)", n)
	}
	if n := count("m", "interactive"); n != 3 {
		t.Errorf("model m admitted %d over three replicas, want 3 (its burst)", n)
	}
}

// TestFreshReplicasServeAtOnce: two fresh replicas on a fresh Redis with
// the default lease time (10 s) and heartbeat (500 ms), a request sent to
// each as they start and allowed to wait (ttft_deadline: 0s): each is
// served within 3 s, not a lease time later (issue 35: 9.9 s), and the pod
// never runs more than its window meanwhile. Real time, bounded by the
// requests' own deadline.
func TestFreshReplicasServeAtOnce(t *testing.T) {
	t.Parallel()
	redis := clustertest.StartRedis(t)
	pod := newBusyPod(t, 0)
	quietRedisOnce.Do(func() { goredis.SetLogger(quietRedis{}) }) // as main does
	policy := `
upstreams: [{name: pod, url: "` + pod.url + `", max_inflight: 4, min_inflight: 4}]
health_check: {interval: 1h}
fast_breaker: {qps: 0}
queue: {max_length: 100, max_wait: 60s, starvation_after: 30s, ttft_deadline: 0s}
cluster: {redis: {url: "` + redis.URL() + `"}, timeout: 200ms, replica_id: REPLICA}
`
	ctx, cancel := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	t.Cleanup(func() { cancel(); loops.Wait() })
	apps := make([]*app, 2)
	for i := range apps {
		a, err := newApp(mustParse(t, strings.ReplaceAll(policy, "REPLICA", "r"+string(rune('0'+i)))), appOptions{})
		if err != nil {
			t.Fatal(err)
		}
		apps[i] = a
	}
	start := time.Now()
	for _, a := range apps {
		loops.Go(func() { a.shared.Run(ctx) })
	}
	var wg sync.WaitGroup
	for i, a := range apps {
		wg.Go(func() {
			rctx, rcancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer rcancel()
			rec := httptest.NewRecorder()
			a.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions",
				strings.NewReader(`{"model":"m","prompt":"x","max_tokens":4}`)).WithContext(rctx))
			if took := time.Since(start); rec.Code != http.StatusOK || took > 3*time.Second {
				t.Errorf("r%d's first request = %d after %v, want 200 within 3s", i, rec.Code, took.Round(time.Millisecond))
				return
			}
			t.Logf("r%d's first request served after %v", i, time.Since(start).Round(time.Millisecond))
		})
	}
	wg.Wait()
	if pod.max > 4 {
		t.Errorf("the pod ran %d at once, want ≤ 4", pod.max)
	}
}

// TestReadyzWaitsForAShare: a fresh replica on a Redis that is new holds
// no share of any pod until the write-back time after the new epoch's
// first heartbeat (2 × heartbeat + timeout), so /readyz says so with 503;
// once the epoch is old (a Redis up for long) one heartbeat grants a share
// and /readyz answers 200.
func TestReadyzWaitsForAShare(t *testing.T) {
	t.Parallel()
	redis := clustertest.StartRedis(t)
	pod := newBusyPod(t, 0)
	a, err := newApp(mustParse(t, strings.ReplaceAll(clusterPolicy(redis, pod.url, ""), "REPLICA", "r0")), appOptions{})
	if err != nil {
		t.Fatal(err)
	}
	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		a.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	if err := a.shared.Cluster().Beat(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "no share") {
		t.Fatalf("/readyz in a new epoch = %d %q, want 503 naming the missing share", code, body)
	}
	oldEpoch(t, a)
	if err := a.shared.Cluster().Beat(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code, body := readyz(); code != http.StatusOK {
		t.Fatalf("/readyz with a share = %d %q, want 200", code, body)
	}
}
