package scale

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestScalerObserveAt(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	sc, err := New(Settings{Interval: 10 * time.Second, Horizon: 10 * time.Second, TargetUtilization: 1, Alpha: 1, Beta: 1,
		MaxReplicas: 20, Stabilization: time.Nanosecond}, reg)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		at      time.Duration
		counts  map[string]Counts
		desired map[string]int
		hold    string
	}{
		{at: 0, counts: map[string]Counts{poolAll: {arrivals: 100, served: map[string]float64{"a": 50}, pods: 2}},
			desired: map[string]int{poolAll: 2}, hold: noData},
		// 10s later: 400 arrived (40/s), a served 100 (10/s), 20 refused
		// for queue_full: saturated, so a pod sustains 10/s; the forecast
		// (no trend yet) is 40/s: 4 pods.
		{at: 10 * time.Second, counts: map[string]Counts{poolAll: {arrivals: 500, served: map[string]float64{"a": 150},
			refused: map[string]float64{"queue_full": 20}, pods: 2}}, desired: map[string]int{poolAll: 4}},
		// a pool gone is forgotten; a new one starts with no data
		{at: 20 * time.Second, counts: map[string]Counts{"m": {pods: 3}}, desired: map[string]int{"m": 3}, hold: noData},
	}
	for i, st := range steps {
		sc.observeAt(t0.Add(st.at), st.counts)
		snap := sc.Snapshot()
		if len(snap) != len(st.desired) {
			t.Fatalf("step %d: Snapshot() = %+v, want pools %v", i, snap, st.desired)
		}
		for _, p := range snap {
			if p.Desired != st.desired[p.Pool] || p.Hold != st.hold {
				t.Errorf("step %d: pool %s desired %d hold %q, want %d %q", i, p.Pool, p.Desired, p.Hold, st.desired[p.Pool], st.hold)
			}
			if got := testutil.ToFloat64(sc.desired.WithLabelValues(p.Pool)); got != float64(st.desired[p.Pool]) {
				t.Errorf("step %d: gatekeeper_desired_replicas{pool=%q} = %v, want %d", i, p.Pool, got, st.desired[p.Pool])
			}
		}
	}
	if n := testutil.CollectAndCount(sc.desired); n != 1 {
		t.Errorf("desired series = %d, want 1 (the removed pool's deleted)", n)
	}
	if _, err := New(Settings{Alpha: 3}, nil); err == nil {
		t.Error("New(Alpha 3) = nil error, want one")
	}
}

func TestRatesCounterReset(t *testing.T) {
	t.Parallel()
	in := rates(Counts{arrivals: 100, served: map[string]float64{"a": 10}}, Counts{arrivals: 50, served: map[string]float64{"a": 30, "b": 5}}, 10*time.Second)
	if in.Arrivals != 0 || in.PodRates["a"] != 2 || in.PodRates["b"] != 0.5 {
		t.Errorf("rates() = %+v, want arrivals 0 (reset), a 2/s, b 0.5/s", in)
	}
}

func TestScalerRun(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sc, err := New(Settings{Interval: 15 * time.Second}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		reads := 0
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Second)
		defer cancel()
		err = sc.Run(ctx, func() map[string]Counts {
			mu.Lock()
			defer mu.Unlock()
			reads++
			return map[string]Counts{poolAll: {pods: 1}}
		})
		if !errors.Is(err, context.DeadlineExceeded) || reads != 4 { // at 0, 15, 30, 45s
			t.Errorf("Run() = %v after %d reads, want DeadlineExceeded after 4", err, reads)
		}
	})
}

func TestScalerConcurrent(t *testing.T) {
	t.Parallel()
	sc, err := New(Settings{}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				sc.observeAt(t0.Add(time.Duration(i*100+j)*time.Second), map[string]Counts{poolAll: {arrivals: float64(j), pods: 1}})
				_ = sc.Snapshot()
			}
		})
	}
	wg.Wait()
}

func TestGather(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	req := prometheus.NewCounterVec(prometheus.CounterOpts{Name: seriesRequests}, []string{"outcome"})
	rej := prometheus.NewCounterVec(prometheus.CounterOpts{Name: seriesRejected}, []string{"reason"})
	resp := prometheus.NewCounterVec(prometheus.CounterOpts{Name: seriesResponses}, []string{"upstream", "status_class"})
	level := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: seriesLevel}, []string{"upstream"})
	avail := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: seriesAvailable}, []string{"upstream"})
	queue := prometheus.NewGauge(prometheus.GaugeOpts{Name: seriesQueue})
	reg.MustRegister(req, rej, resp, level, avail, queue)
	req.WithLabelValues("ok").Add(7)
	req.WithLabelValues("queue_full").Add(3)
	rej.WithLabelValues("queue_full").Add(2)
	rej.WithLabelValues("no_memory").Add(1)
	rej.WithLabelValues("bad_request").Add(9) // not a capacity cause
	resp.WithLabelValues("a", "2xx").Add(5)
	resp.WithLabelValues("a", "5xx").Add(1)
	resp.WithLabelValues("b", "2xx").Add(1)
	level.WithLabelValues("a").Set(1)
	level.WithLabelValues("b").Set(0)
	avail.WithLabelValues("a").Set(1)
	avail.WithLabelValues("b").Set(0)
	queue.Set(4)
	c := Gather(reg)()[poolAll]
	got := []any{c.arrivals, c.refused["queue_full"], c.refused["no_memory"], len(c.refused), c.served["a"], c.served["b"], c.cut, c.pods, c.queue}
	want := []any{10.0, 2.0, 1.0, 2, 6.0, 1.0, 1, 2, 4}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("Gather() = %+v; field %d = %v, want %v", c, i, got[i], want[i])
		}
	}
}

func TestMetricsHelp(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := New(Settings{}, reg); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Settings{}, reg); err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Errorf("New() on a registry that has its gauges = %v, want a duplicate registration error", err)
	}
}
