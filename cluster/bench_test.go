package cluster

import (
	"slices"
	"testing"
	"time"
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

func benchSettings() Settings { return Settings{Timeout: DefaultTimeout, DownAfter: 1 << 30} }

// BenchmarkAllow is one shared limiter decision over a client and the
// global bucket (one EVALSHA) on loopback.
func BenchmarkAllow(b *testing.B) {
	r := startRedis(b)
	c := replicas(b, r, 1, benchSettings())[0]
	l, err := c.NewLimiter(LimiterSettings{QPS: 1e6, ClientQPS: 1e6})
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
		} else if !d.Allowed {
			b.Fatalf("Allow() = %+v", d)
		}
	}
	reportLatency(b, "", lat)
	b.ReportMetric(float64(timeouts)/float64(len(lat)), "timeouts/op")
}

// BenchmarkAcquireRelease is one lease acquired (an EVALSHA) and released
// (a ZREM) on loopback. Only the acquire is on a request's way in; the
// release runs after its response.
func BenchmarkAcquireRelease(b *testing.B) {
	r := startRedis(b)
	c := replicas(b, r, 1, benchSettings())[0]
	ctx := b.Context()
	var acq, rel []time.Duration
	timeouts := 0
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		l, ok, err := c.Acquire(ctx, "pod", 1<<20)
		mid := time.Now()
		if !ok || err != nil {
			b.Fatalf("Acquire() = %v, %v", ok, err)
		}
		c.Release(ctx, l)
		acq, rel = append(acq, mid.Sub(start)), append(rel, time.Since(mid))
		if s := c.Snapshot(); s.PendingReleases > timeouts {
			timeouts = s.PendingReleases
		}
	}
	reportLatency(b, "acquire-", acq)
	reportLatency(b, "release-", rel)
	b.ReportMetric(float64(timeouts)/float64(len(acq)), "timeouts/op")
}
