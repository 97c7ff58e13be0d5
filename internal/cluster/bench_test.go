package cluster

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/quota"
)

// The benchmarks run with the production timeout but never switch to local
// mode (DownAfter is huge): a call that times out on a loaded machine is
// counted in "timeouts/op" instead of ending the run.

// reportLatency adds the p50 and p99 of d, in µs, to b's results, the
// units prefixed with what.
func reportLatency(b *testing.B, what string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	at := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(at(0.50), what+"p50-µs")
	b.ReportMetric(at(0.99), what+"p99-µs")
}

func benchSettings() Settings { return Settings{Timeout: defaultTimeout, DownAfter: 1 << 30} }

// BenchmarkAllow is one shared limiter decision over a client and the
// global bucket on loopback: mostly from this replica's batches, one
// EVALSHA per batch.
func BenchmarkAllow(b *testing.B) {
	r := startRedis(b)
	c := replicas(b, r, 1, benchSettings())[0]
	l, err := c.newLimiter(limiterSettings{qps: 1e6, clientQPS: 1e6})
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	var lat []time.Duration
	timeouts := 0
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		d, err := l.Allow(ctx, "0123456789abcdef0123456789abcdef")
		lat = append(lat, time.Since(start))
		if err != nil {
			timeouts++
		} else if !d.allowed {
			b.Fatalf("Allow() = %+v", d)
		}
	}
	reportLatency(b, "", lat)
	b.ReportMetric(float64(timeouts)/float64(len(lat)), "timeouts/op")
}

// BenchmarkBeat is one heartbeat renewing the leases on 16 pods (one
// EVALSHA) on loopback: the only Redis call the windows cost, once per
// heartbeat interval per replica, whatever the traffic.
func BenchmarkBeat(b *testing.B) {
	r := startRedis(b)
	c := replicas(b, r, 1, benchSettings())[0]
	pods := map[string]int{}
	for i := range 16 {
		pods["pod-"+strconv.Itoa(i)] = 256
	}
	c.SetPods(pods)
	ctx := b.Context()
	var lat []time.Duration
	timeouts := 0
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		if err := c.Beat(ctx); err != nil {
			timeouts++
		}
		lat = append(lat, time.Since(start))
	}
	reportLatency(b, "", lat)
	b.ReportMetric(float64(timeouts)/float64(len(lat)), "timeouts/op")
}

// BenchmarkQuotaCharge is one token quota's Charge and Settle over every
// replica on loopback (a client key, a class and a model, both windows
// each): two EVALSHA, one per call.
func BenchmarkQuotaCharge(b *testing.B) {
	r := startRedis(b)
	c := replicas(b, r, 1, benchSettings())[0]
	local, err := quota.New(quota.Settings{})
	if err != nil {
		b.Fatal(err)
	}
	q := c.NewQuotas(local)
	huge := quota.Limit{PerMinute: 1 << 50, PerDay: 1 << 50}
	if err := q.SetLimits(quota.Limits{PerClient: huge, Classes: map[string]quota.Limit{"chat": huge},
		Models: map[string]quota.Limit{"m": huge}}); err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	var lat []time.Duration
	failed := 0
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		s, err := q.Charge(ctx, quota.Ask{Client: "client-" + strconv.Itoa(i%1024), Class: "chat", Model: "m", Estimate: 1000})
		if err != nil {
			failed++
		}
		s.Settle(900)
		lat = append(lat, time.Since(start))
		i++
	}
	reportLatency(b, "", lat)
	b.ReportMetric(float64(failed)/float64(len(lat)), "refused/op")
}
