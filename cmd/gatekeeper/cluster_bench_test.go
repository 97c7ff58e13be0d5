package main

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/gatekeeper-dev/gatekeeper/internal/cluster/clustertest"
)

// benchClusterPolicy: a pod that answers at once, a window of 256 and a
// global rate that is on but never binds, so every request is admitted:
// the steady state the Redis cost is measured at.
const benchClusterPolicy = `
upstreams: [{name: pod, url: "POD_URL", max_inflight: 256}]
health_check: {interval: 1h}
fast_breaker: {qps: 100000, burst: 2000}
CLUSTER
`

// BenchmarkClusterAdmission runs one load (16 clients, b.N requests in
// all) through one gatekeeper alone and then through two replicas sharing
// a real redis-server (8 clients each), in one run, and reports the Redis
// commands per admitted request (INFO commandstats: the heartbeats and
// the rate batches) and the p99 that cluster mode adds:
//
//	go test -run '^$' -bench ClusterAdmission -benchtime 20000x ./cmd/gatekeeper
func BenchmarkClusterAdmission(b *testing.B) {
	redis := clustertest.StartRedis(b)
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[]}`))
	})
	pod := httptest.NewServer(mux)
	b.Cleanup(pod.Close)
	policy := strings.ReplaceAll(benchClusterPolicy, "POD_URL", pod.URL)
	alone, err := newApp(mustParse(b, strings.ReplaceAll(policy, "CLUSTER", "")), appOptions{})
	if err != nil {
		b.Fatal(err)
	}
	shared := strings.ReplaceAll(policy, "CLUSTER",
		`cluster: {redis: {url: "`+redis.URL()+`"}, replica_id: REPLICA}`) // every other key at its default
	apps, _ := replicaApps(b, 2, shared)
	rc := goredis.NewClient(&goredis.Options{Addr: redis.Addr()})
	defer rc.Close()

	b.ResetTimer()
	soloLat, soloOK := driveApps(b, []*app{alone}, 16, b.N)
	before := redisCalls(b, rc)
	start := time.Now()
	clusterLat, clusterOK := driveApps(b, apps, 16, b.N)
	elapsed := time.Since(start)
	calls := redisCalls(b, rc) - before
	b.StopTimer()
	if soloOK != b.N || clusterOK != b.N {
		b.Fatalf("admitted %d alone and %d in cluster mode of %d each, want all", soloOK, clusterOK, b.N)
	}
	p99 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[int(0.99*float64(len(d)-1))].Microseconds())
	}
	b.ReportMetric(float64(calls)/float64(clusterOK), "redis-cmds/admitted")
	b.ReportMetric(float64(calls)/elapsed.Seconds(), "redis-cmds/s")
	b.ReportMetric(p99(soloLat), "alone-p99-µs")
	b.ReportMetric(p99(clusterLat), "cluster-p99-µs")
	b.ReportMetric(p99(clusterLat)/p99(soloLat), "p99-ratio")
}

// driveApps sends total requests from clients goroutines spread over apps
// and returns each request's latency and how many got 200.
func driveApps(b *testing.B, apps []*app, clients, total int) ([]time.Duration, int) {
	var mu sync.Mutex
	lat := make([]time.Duration, 0, total)
	ok := 0
	var wg sync.WaitGroup
	per := (total + clients - 1) / clients
	for c := range clients {
		a := apps[c%len(apps)]
		n := min(per, total-c*per)
		wg.Go(func() {
			mine := make([]time.Duration, 0, max(n, 0))
			good := 0
			for range n {
				start := time.Now()
				rec := httptest.NewRecorder()
				a.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions",
					strings.NewReader(`{"model":"m","prompt":"x","max_tokens":4}`)))
				mine = append(mine, time.Since(start))
				if rec.Code == http.StatusOK {
					good++
				}
			}
			mu.Lock()
			lat, ok = append(lat, mine...), ok+good
			mu.Unlock()
		})
	}
	wg.Wait()
	return lat, ok
}

// redisCalls sums INFO commandstats' calls over every command but INFO.
func redisCalls(b *testing.B, rc *goredis.Client) int64 {
	b.Helper()
	info, err := rc.Info(b.Context(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		sum += n
	}
	return sum
}
