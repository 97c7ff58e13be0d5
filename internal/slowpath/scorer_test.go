package slowpath

import (
	"math"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/cluster"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/route"
)

func TestPodState(t *testing.T) {
	t.Parallel()
	nan := math.NaN()
	sig := func(kv ...any) pressure.UpstreamState {
		us := pressure.UpstreamState{Signals: map[pressure.Signal]pressure.Value{}}
		for i := 0; i < len(kv); i += 2 {
			us.Signals[kv[i].(pressure.Signal)] = kv[i+1].(pressure.Value)
		}
		return us
	}
	for _, tt := range []struct {
		name string
		us   pressure.UpstreamState
		shed float64
		need int64
		want route.Pod
	}{
		{"nothing reported", sig(), 1.5, 0, route.Unknown},
		{"vLLM only", sig(pressure.Waiting, pressure.Value{Value: 3}, pressure.KVCacheUsage, pressure.Value{Value: 0.4}), 1.5, 0,
			route.Pod{Waiting: 3, KVUsage: 0.4, Memory: nan}},
		{"fragmentation halfway to shed", sig(pressure.Fragmentation, pressure.Value{Value: 1.25}), 1.5, 0,
			route.Pod{Waiting: nan, KVUsage: nan, Memory: 0.5}},
		{"no fragmentation rule", sig(pressure.Fragmentation, pressure.Value{Value: 1.25}), 0, 0, route.Unknown},
		{"free memory against the in-flight estimate", sig(pressure.Fragmentation, pressure.Value{Value: 1},
			pressure.FreeMemory, pressure.Value{Value: 1000}), 1.5, 750, route.Pod{Waiting: nan, KVUsage: nan, Memory: 0.25}},
		{"stale is unknown", sig(pressure.Waiting, pressure.Value{Value: 3, Stale: true}, pressure.KVCacheUsage, pressure.Value{Value: 0.4}),
			1.5, 0, route.Pod{Waiting: nan, KVUsage: 0.4, Memory: nan}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := PodState(tt.us, tt.shed, tt.need)
			if !samePod(got, tt.want) {
				t.Errorf("PodState = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func samePod(a, b route.Pod) bool {
	eq := func(x, y float64) bool { return x == y || math.IsNaN(x) && math.IsNaN(y) || math.Abs(x-y) < 1e-9 }
	return eq(a.Waiting, b.Waiting) && eq(a.KVUsage, b.KVUsage) && eq(a.Memory, b.Memory)
}

// TestObserveSetsScorerInputs: a round passes each pod's readings to the
// router, with the pod's own fragmentation rule and its in-flight memory.
func TestObserveSetsScorerInputs(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`
upstreams:
  - {name: a, url: "http://a.invalid:8000", vocab_size: 100}
  - {name: b, url: "http://b.invalid:8000", rules: {fragmentation: {degrade: 1.1, shed: 2}}}
pressure: {rules: {fragmentation: {degrade: 1.2, shed: 1.5}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := control.New(control.FromPolicy(cfg))
	if err != nil {
		t.Fatal(err)
	}
	q, _ := queue.New(queue.Settings{})
	w := cluster.NewWindows(cluster.WindowsSettings{Queue: q})
	w.SetWindow("a", 10)
	w.SetWindow("b", 10)
	router, _ := route.New(route.Settings{Weights: route.Weights{Load: 1}})
	p, err := New(Settings{Controller: ctl, Queue: q, Windows: w, Config: func() *config.Config { return cfg },
		Decided: func(string, bool) {}, Router: router})
	if err != nil {
		t.Fatal(err)
	}
	q.SetMemoryBudget("a", 1000)
	s := q.TryAcquire(queue.Request{Seqs: 1, Memory: 4, Exclude: []string{"b"}}) // 4 × 100 bytes in flight on a
	if s == nil {
		t.Fatal("no slot on a")
	}
	defer s.Release()
	frag := func(v float64) map[pressure.Signal]pressure.Value {
		return map[pressure.Signal]pressure.Value{pressure.Fragmentation: {Value: v}, pressure.FreeMemory: {Value: 1000},
			pressure.Waiting: {Value: 2}, pressure.KVCacheUsage: {Value: 0.5}}
	}
	p.Observe(pressure.State{Upstreams: []pressure.UpstreamState{{Name: "a", Signals: frag(1.1)}, {Name: "b", Signals: frag(1.5)}}})
	for _, c := range []struct {
		pod  string
		want route.Pod
	}{
		{"a", route.Pod{Waiting: 2, KVUsage: 0.5, Memory: 0.6}}, // min((1.5−1.1)/0.5 = 0.8, (1000−400)/1000 = 0.6)
		{"b", route.Pod{Waiting: 2, KVUsage: 0.5, Memory: 0.5}}, // its own shed 2: (2−1.5)/1
	} {
		if got, ok := router.PodState(c.pod); !ok || !samePod(got, c.want) {
			t.Errorf("PodState(%s) = %+v, %v; want %+v", c.pod, got, ok, c.want)
		}
	}
}
