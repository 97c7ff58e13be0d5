package breaker

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkLimiterAllow measures the per-request decision on the admitted
// path (buckets large enough never to refuse), with the real clock.
func BenchmarkLimiterAllow(b *testing.B) {
	cases := []struct {
		name string
		s    LimiterSettings
		keys int // 0: empty key, global bucket only
	}{
		{name: "global", s: LimiterSettings{QPS: 1e12, Burst: 1 << 30}},
		{name: "unlimited", s: LimiterSettings{}},
		{name: "client", s: LimiterSettings{QPS: 1e12, Burst: 1 << 30, ClientQPS: 1e12, ClientBurst: 1 << 30}, keys: 1000},
	}
	for _, bc := range cases {
		l, err := NewLimiter(bc.s)
		if err != nil {
			b.Fatal(err)
		}
		keys := make([]string, max(bc.keys, 1))
		for i := range bc.keys {
			keys[i] = "Bearer sk-" + strconv.Itoa(i)
		}
		b.Run(bc.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := l.Allow(context.Background(), keys[i%len(keys)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if err := l.Allow(context.Background(), keys[i%len(keys)]); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
	}
}

// BenchmarkLimiterRefuse measures the refusal path: reserve, cancel, and
// build the *LimitError.
func BenchmarkLimiterRefuse(b *testing.B) {
	l, err := NewLimiter(LimiterSettings{QPS: 1e-9, Burst: 1, ClientQPS: 1e-9, ClientBurst: 1})
	if err != nil {
		b.Fatal(err)
	}
	_ = l.Allow(context.Background(), "k") // empty both buckets
	_ = l.Allow(context.Background(), "")
	for _, key := range []string{"", "k"} {
		b.Run("key="+key, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if l.Allow(context.Background(), key) == nil {
					b.Fatal("admitted")
				}
			}
		})
	}
}

// BenchmarkLimiterAllowTenant measures the admitted path with the global
// bucket split by tenant: a named tenant with a cap and a reservation, and
// unnamed tenants under the default cap (1000 of them, within MaxTenants).
func BenchmarkLimiterAllowTenant(b *testing.B) {
	l, err := NewLimiter(LimiterSettings{QPS: 1e12, Burst: 1 << 30, DefaultMaxShare: 0.5,
		Shares: map[string]TenantShare{"named": {Min: 0.2, Max: 0.8}}})
	if err != nil {
		b.Fatal(err)
	}
	unnamed := make([]string, 1000)
	for i := range unnamed {
		unnamed[i] = "sha256:" + strconv.Itoa(i)
	}
	for _, bc := range []struct {
		name    string
		tenants []string
	}{{"named", []string{"named"}}, {"unnamed", unnamed}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := l.AllowTenant(context.Background(), "", bc.tenants[i%len(bc.tenants)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
