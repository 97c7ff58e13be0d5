package scale

import (
	"maps"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestTally(t *testing.T) {
	t.Parallel()
	var tl Tally
	tl.Arrived("llama") // before any sample: no model is counted
	tl.keep(map[string][]string{"llama": {"a"}, "qwen": {"b"}, poolAll: {"a", "b"}})
	tl.Arrived("llama")
	tl.Arrived("llama")
	tl.Arrived("mistral") // no pod lists it: not counted, no entry
	tl.Arrived("")
	tl.Refused("llama", "queue_full")
	tl.Refused("llama", "rate_limited") // not a capacity cause
	tl.Refused("llama", "upstream_overloaded")
	tl.Waiting("llama", 1)
	tl.Waiting("llama", 1)
	tl.Waiting("qwen", -1) // began to wait before qwen was counted
	if got := len(*tl.models.Load()); got != 2 {
		t.Errorf("models counted = %d, want 2 (llama, qwen; never all or a client's name)", got)
	}
	c := tl.counts("llama")
	want := Counts{arrivals: 2, refused: map[string]float64{"queue_full": 1, "upstream_overloaded": 1}, queue: 2}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("counts(llama) = %+v, want %+v", c, want)
	}
	if c := tl.counts("qwen"); c.queue != 0 || c.arrivals != 0 {
		t.Errorf("counts(qwen) = %+v, want nothing and never a negative queue", c)
	}
	tl.keep(map[string][]string{"llama": {"a"}}) // qwen no longer listed
	if c := tl.counts("llama"); c.arrivals != 2 {
		t.Errorf("after keep, counts(llama).arrivals = %v, want 2 (kept)", c.arrivals)
	}
	if m := tl.get("qwen"); m != nil {
		t.Error("qwen is still counted after no pod lists it")
	}
	var none *Tally // a core without a scaler's tally
	none.Arrived("llama")
	none.Waiting("llama", 1)
}

// fakeApp is the series Gather reads, as the app registers them.
type fakeApp struct {
	reg            *prometheus.Registry
	req, rej, resp *prometheus.CounterVec
	level, avail   *prometheus.GaugeVec
	queue          prometheus.Gauge
}

func newFakeApp(pods ...string) *fakeApp {
	f := &fakeApp{reg: prometheus.NewRegistry(),
		req:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: seriesRequests}, []string{"outcome"}),
		rej:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: seriesRejected}, []string{"reason"}),
		resp:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: seriesResponses}, []string{"upstream", "status_class"}),
		level: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: seriesLevel}, []string{"upstream"}),
		avail: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: seriesAvailable}, []string{"upstream"}),
		queue: prometheus.NewGauge(prometheus.GaugeOpts{Name: seriesQueue}),
	}
	f.reg.MustRegister(f.req, f.rej, f.resp, f.level, f.avail, f.queue)
	for _, p := range pods {
		f.avail.WithLabelValues(p).Set(1)
		f.level.WithLabelValues(p).Set(0)
	}
	return f
}

func TestGatherPools(t *testing.T) {
	t.Parallel()
	f := newFakeApp("a", "b", "c")
	f.req.WithLabelValues("served").Add(12)
	f.rej.WithLabelValues("queue_full").Add(3)
	f.resp.WithLabelValues("a", "2xx").Add(5)
	f.resp.WithLabelValues("b", "2xx").Add(4)
	f.resp.WithLabelValues("c", "5xx").Add(2)
	f.level.WithLabelValues("b").Set(1)
	f.queue.Set(6)
	// b serves both models; "gone" is listed by the registry but has no
	// series yet; a model named all has no pool of its own.
	models := map[string][]string{"llama": {"a", "b"}, "qwen": {"b", "c", "gone"}, poolAll: {"a"}}
	var tl Tally
	read := GatherPools(f.reg, &tl, func() map[string][]string { return models })
	read() // the first sample names the models counted
	tl.Arrived("llama")
	tl.Refused("llama", "deadline")
	tl.Waiting("qwen", 1)
	got := read()
	want := map[string]Counts{
		poolAll: {arrivals: 12, refused: map[string]float64{"queue_full": 3}, queue: 6, cut: 1, pods: 3,
			served: map[string]float64{"a": 5, "b": 4, "c": 2}},
		"llama": {arrivals: 1, refused: map[string]float64{"deadline": 1}, cut: 1, pods: 2, served: map[string]float64{"a": 5, "b": 4}},
		"qwen":  {refused: map[string]float64{}, queue: 1, cut: 1, pods: 2, served: map[string]float64{"b": 4, "c": 2}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GatherPools() =\n%+v\nwant\n%+v", got, want)
	}
	if !reflect.DeepEqual(Gather(f.reg)(), map[string]Counts{poolAll: want[poolAll]}) {
		t.Errorf("Gather() = %+v, want the pool all alone", Gather(f.reg)())
	}
	models = nil // routing by model turned off: only all
	if got := read(); !reflect.DeepEqual(slicesOf(got), []string{poolAll}) {
		t.Errorf("GatherPools() without models = pools %v, want [all]", slicesOf(got))
	}
}

func slicesOf(m map[string]Counts) []string {
	var out []string
	for k := range maps.Keys(m) {
		out = append(out, k)
	}
	return out
}

// TestScalerModelPools: two model pools behind one gatekeeper, one
// saturated (a queue, refusals, its two pods at what they sustain) and one
// idle, get different desired counts, step by step on an injected clock.
func TestScalerModelPools(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	sc, err := New(Settings{Interval: 10 * time.Second, Horizon: 10 * time.Second, TargetUtilization: 1, Alpha: 1, Beta: 1,
		MaxReplicas: 20, Stabilization: time.Nanosecond}, reg)
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeApp("a", "b", "c")
	read := GatherPools(f.reg, sc.Tally(), func() map[string][]string {
		return map[string][]string{"llama": {"a", "b"}, "qwen": {"c"}}
	})
	tl := sc.Tally()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type traffic struct {
		llama, llamaRefused, qwen int     // arrivals and refusals this interval
		llamaWaiting              int     // waiting for llama now
		a, b, c                   float64 // each pod's responses this interval
	}
	steps := []struct {
		at      time.Duration
		add     traffic
		desired map[string]int
		hold    map[string]string
	}{
		{at: 0, desired: map[string]int{"llama": 2, "qwen": 1}, hold: map[string]string{"llama": noData, "qwen": noData}},
		// llama: 300 arrived (30/s), 50 refused, 20 waiting; a and b served
		// 10/s each: saturated, so a pod sustains 10/s; demand 30 + 20/10 =
		// 32/s: 4 pods. qwen: 2/s arrived and served by c: 1 pod.
		{at: 10 * time.Second, add: traffic{llama: 300, llamaRefused: 50, qwen: 20, llamaWaiting: 20, a: 100, b: 100, c: 20},
			desired: map[string]int{"llama": 4, "qwen": 1}},
		// llama climbs to 40/s (trend 10/interval: forecast 50/s) with the
		// same 20 waiting: 52/s, 6 pods; qwen stays idle.
		{at: 20 * time.Second, add: traffic{llama: 400, llamaRefused: 100, qwen: 20, a: 100, b: 100, c: 20},
			desired: map[string]int{"llama": 6, "qwen": 1}},
	}
	for i, st := range steps {
		for range st.add.llama {
			tl.Arrived("llama")
		}
		for range st.add.llamaRefused {
			tl.Refused("llama", "queue_full")
		}
		for range st.add.qwen {
			tl.Arrived("qwen")
		}
		tl.Waiting("llama", st.add.llamaWaiting)
		f.resp.WithLabelValues("a", "2xx").Add(st.add.a)
		f.resp.WithLabelValues("b", "2xx").Add(st.add.b)
		f.resp.WithLabelValues("c", "2xx").Add(st.add.c)
		sc.observeAt(t0.Add(st.at), read())
		for _, p := range sc.Snapshot() {
			if p.Pool == poolAll {
				continue
			}
			if p.Desired != st.desired[p.Pool] || p.Hold != st.hold[p.Pool] {
				t.Errorf("step %d: pool %s desired %d hold %q (%+v), want %d %q", i, p.Pool, p.Desired, p.Hold, p.Estimate, st.desired[p.Pool], st.hold[p.Pool])
			}
			if got := testutil.ToFloat64(sc.desired.WithLabelValues(p.Pool)); got != float64(st.desired[p.Pool]) {
				t.Errorf("step %d: gatekeeper_desired_replicas{pool=%q} = %v, want %d", i, p.Pool, got, st.desired[p.Pool])
			}
		}
	}
	if n := testutil.CollectAndCount(sc.desired); n != 3 {
		t.Errorf("desired series = %d, want 3 (all, llama, qwen)", n)
	}
}

// BenchmarkTally is what the decision core adds to a request of a counted
// model: its arrival and its wait for a slot.
func BenchmarkTally(b *testing.B) {
	var tl Tally
	tl.keep(map[string][]string{"llama": {"a"}, "qwen": {"b"}, "mistral": {"c"}})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tl.Arrived("qwen")
			tl.Waiting("qwen", 1)
			tl.Waiting("qwen", -1)
		}
	})
}
