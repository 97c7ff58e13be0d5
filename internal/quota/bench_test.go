package quota

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
)

// benchQuotas is a Quotas on the real clock whose quotas never refuse:
// every charge goes through the whole path (a client key, a class and a
// model, both windows each).
func benchQuotas(b *testing.B) (*Quotas, []string) {
	b.Helper()
	q, err := New(Settings{})
	if err != nil {
		b.Fatal(err)
	}
	huge := Limit{PerMinute: 1 << 50, PerDay: 1 << 55}
	if err := q.SetLimits(Limits{PerClient: huge, Classes: map[string]Limit{"chat": huge},
		Models: map[string]Limit{"m": huge}}); err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "sk-client-" + strconv.Itoa(i)
	}
	return q, keys
}

// BenchmarkChargeSettle is one request's Charge and Settle from many
// goroutines at once, over 1024 client keys.
func BenchmarkChargeSettle(b *testing.B) {
	q, keys := benchQuotas(b)
	var seed atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seed.Add(1)) * 101
		for pb.Next() {
			s, err := q.Charge(context.Background(), Ask{Client: keys[i%len(keys)], Class: "chat", Model: "m", Estimate: 1000})
			if err != nil {
				b.Error(err)
				return
			}
			s.Settle(900)
			i++
		}
	})
}

// BenchmarkChargeSettleSerial is the same from one goroutine: the cost
// without contention.
func BenchmarkChargeSettleSerial(b *testing.B) {
	q, keys := benchQuotas(b)
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		s, err := q.Charge(context.Background(), Ask{Client: keys[i%len(keys)], Class: "chat", Model: "m", Estimate: 1000})
		if err != nil {
			b.Fatal(err)
		}
		s.Settle(900)
		i++
	}
}
