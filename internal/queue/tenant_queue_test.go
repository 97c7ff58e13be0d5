package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
)

// tenantOf returns tenant name's entry (priority 0) in q's Stats.
func tenantOf(q *Queue, name string) (TenantStats, bool) {
	for _, ts := range q.Stats().Tenants {
		if ts.Tenant == name && ts.Priority == 0 {
			return ts, true
		}
	}
	return TenantStats{}, false
}

// A Slot settles its tenant once, before or after Release; TryAcquire's
// slot is charged and settled like Acquire's.
func TestSlotSettle(t *testing.T) {
	t.Parallel()
	q := newQueue(t, Settings{}, map[string]int{"a": 4})
	s1, err := q.Acquire(t.Context(), Request{Tenant: "x", Weight: 2, Service: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if ts, _ := tenantOf(q, "x"); ts.Counter != 500 || ts.Service != 1000 || ts.InFlight != 1 || ts.Weight != 2 {
		t.Fatalf("after the grant: %+v, want counter 500, service 1000, one in flight, weight 2", ts)
	}
	s1.Settle(200)
	s1.Settle(5000) // only the first counts
	if ts, _ := tenantOf(q, "x"); ts.Counter != 100 || ts.Service != 200 {
		t.Fatalf("after Settle(200): %+v, want counter 100, service 200", ts)
	}
	s2 := q.TryAcquire(Request{Tenant: "x", Weight: 2, Service: 100})
	if s2 == nil {
		t.Fatal("TryAcquire = nil, want a slot")
	}
	s1.Release()
	s2.Release()
	s2.Settle(300) // after Release
	ts, _ := tenantOf(q, "x")
	if ts.Counter != 250 || ts.Service != 500 || ts.InFlight != 0 {
		t.Fatalf("after both: %+v, want counter 100 + 50 + 100, service 500, none in flight", ts)
	}
}

// The waiters of a light tenant do not wait behind a heavy tenant's backlog
// in Queue either: each grant goes to the one with the least counter.
func TestQueueSharesBetweenTenants(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, Settings{}, map[string]int{"a": 1})
		first, _ := q.Acquire(t.Context(), Request{Tenant: "heavy", Service: 100})
		order := make(chan string, 20)
		for i := range 10 {
			go func() {
				s, err := q.Acquire(t.Context(), Request{Tenant: "heavy", Service: 100})
				if err == nil {
					order <- fmt.Sprint("heavy", i)
					s.Release()
				}
			}()
			synctest.Wait() // arrivals in order
		}
		go func() {
			s, err := q.Acquire(t.Context(), Request{Tenant: "light", Service: 100})
			if err == nil {
				order <- "light"
				s.Release()
			}
		}()
		synctest.Wait()
		first.Release()
		var got []string
		for range 11 {
			got = append(got, <-order)
		}
		if got[1] != "light" {
			t.Fatalf("grant order %v, want light second (lifted to heavy's counter, the tie to heavy's older head)", got)
		}
	})
}

// TestQueueTenantsHammer acquires, settles and releases from many goroutines
// across many tenants (more than MaxTenants) with contexts that end; the
// race detector watches, and at the end nothing waits, nothing is in
// flight, and at most MaxTenants tenants are remembered.
func TestQueueTenantsHammer(t *testing.T) {
	t.Parallel()
	const maxTenants = 20
	q := newQueue(t, Settings{MaxLength: 10_000, MaxTenants: maxTenants}, map[string]int{"a": 3, "b": 2})
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for range 300 {
				ctx, cancel := context.WithCancel(t.Context())
				if r.IntN(10) == 0 {
					cancel() // some give up at once or while they wait
				}
				req := Request{Tenant: fmt.Sprint("t", r.IntN(50)), Weight: float64(1 + r.IntN(3)),
					Service: r.Int64N(1000), Priority: r.IntN(2)}
				var s *Slot
				var err error
				if r.IntN(8) == 0 {
					if s = q.TryAcquire(req); s == nil {
						err = ErrFull
					}
				} else {
					s, err = q.Acquire(ctx, req)
				}
				cancel()
				if err != nil {
					if !errors.Is(err, context.Canceled) && !errors.Is(err, ErrFull) {
						t.Errorf("Acquire = %v", err)
					}
					continue
				}
				if r.IntN(2) == 0 {
					s.Settle(r.Int64N(1000))
					s.Release()
				} else {
					s.Release()
					s.Settle(r.Int64N(1000))
				}
				s.Settle(1) // no-op
			}
		})
	}
	go func() { // readers alongside
		for range 100 {
			q.Stats()
		}
	}()
	wg.Wait()
	st := q.Stats()
	if st.Length != 0 || st.TenantCount > maxTenants || st.TenantCount == 0 {
		t.Fatalf("Stats() = %d waiting, %d tenants; want 0 and 1–%d", st.Length, st.TenantCount, maxTenants)
	}
	for _, ts := range st.Tenants {
		if ts.Waiting != 0 || ts.InFlight != 0 {
			t.Fatalf("tenant %+v still counts waiters or requests in flight", ts)
		}
	}
	for _, w := range st.Windows {
		if w.InFlight != 0 {
			t.Fatalf("window %+v still holds slots", w)
		}
	}
}
