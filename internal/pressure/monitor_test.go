package pressure

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/syncbuf"
)

// funcSource is a Source whose Read calls fn. It counts reads.
type funcSource struct {
	name  string
	fn    func(ctx context.Context) (Reading, error)
	reads atomic.Int64
}

func (s *funcSource) Name() string { return s.name }

func (s *funcSource) Read(ctx context.Context) (Reading, error) {
	s.reads.Add(1)
	return s.fn(ctx)
}

// start runs m until the test's bubble ends, failing the test if Run fails.
func start(t *testing.T, m *Monitor) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	})
	synctest.Wait() // the first reads are in
}

func newMonitor(t *testing.T, s Settings) *Monitor {
	t.Helper()
	if s.Jitter == 0 {
		s.Jitter = -1 // exact schedule: reads at 0, 500ms, 1s, …
	}
	m, err := New(s)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return m
}

func kvSource(name string, fail *atomic.Bool) *funcSource {
	return &funcSource{name: name, fn: func(context.Context) (Reading, error) {
		if fail.Load() {
			return Reading{}, errors.New("connection refused")
		}
		return Reading{Values: map[Signal]float64{KVCacheUsage: 0.5}}, nil
	}}
}

func TestMonitorStaleThenRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fail atomic.Bool
		var logs syncbuf.Buffer
		m := newMonitor(t, Settings{
			Upstreams: []UpstreamSettings{{Name: "a", Sources: []SourceSettings{{Kind: KindVLLM, Source: kvSource("a/vllm", &fail)}}}},
			Logger:    slog.New(slog.NewJSONHandler(&logs, nil)),
		})
		t0 := time.Now()
		start(t, m)
		steps := []struct {
			name      string
			fail      bool
			at        time.Duration // since start, just after the read due then
			wantUp    bool
			wantStale bool
			wantAge   time.Duration
		}{
			{"first read", false, 0, true, false, 0},
			{"fails: down, value kept", true, 600 * time.Millisecond, false, false, 600 * time.Millisecond},
			{"still fresh at stale_after", true, 2 * time.Second, false, false, 2 * time.Second},
			{"stale after stale_after", true, 2100 * time.Millisecond, false, true, 2100 * time.Millisecond},
			{"recovers", false, 2600 * time.Millisecond, true, false, 100 * time.Millisecond},
		}
		for _, st := range steps {
			fail.Store(st.fail)
			time.Sleep(time.Until(t0.Add(st.at)))
			synctest.Wait()
			s := m.snapshot()
			src := s.Sources[0]
			v, ok := s.Upstreams[0].Signals[KVCacheUsage]
			if src.Up != st.wantUp || src.Stale != st.wantStale || (src.LastError != "") == st.wantUp {
				t.Errorf("%s: source = %+v, want up %v, stale %v", st.name, src, st.wantUp, st.wantStale)
			}
			if !ok || v.Value != 0.5 || v.Stale != st.wantStale || v.Age != st.wantAge || v.Source != "a/vllm" {
				t.Errorf("%s: kv_cache_usage = %+v (present %v), want 0.5 stale %v age %v", st.name, v, ok, st.wantStale, st.wantAge)
			}
		}
		out := logs.String()
		if strings.Count(out, `"msg":"pressure source down"`) != 1 || strings.Count(out, `"msg":"pressure source up"`) != 1 {
			t.Errorf("logs = %s, want one down and one up line", out)
		}
	})
}

func TestMonitorHangingSourceDoesNotDelayOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hang := &funcSource{name: "hang", fn: func(ctx context.Context) (Reading, error) {
			<-ctx.Done() // a source that answers only when the timeout cuts it
			return Reading{}, ctx.Err()
		}}
		var fail atomic.Bool
		fast := kvSource("fast", &fail)
		m := newMonitor(t, Settings{Upstreams: []UpstreamSettings{{Name: "a",
			Sources: []SourceSettings{{Source: hang}, {Source: fast}}}}})
		start(t, m)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if n := fast.reads.Load(); n != 7 { // at 0, 0.5 … 3s
			t.Errorf("fast source read %d times in 3s, want 7", n)
		}
		s := m.snapshot()
		if v := s.Upstreams[0].Signals[KVCacheUsage]; v.Stale || v.Age != 0 {
			t.Errorf("kv_cache_usage = %+v, want fresh", v)
		}
		h := s.Sources[0]
		if h.Up || !h.Stale || !strings.Contains(h.LastError, "deadline exceeded") {
			t.Errorf("hanging source = %+v, want down, stale, deadline exceeded", h)
		}
	})
}

func TestMonitorRatesAcrossCounterReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		counts := []float64{0, 10, 20, 5, 15} // 20 → 5: the pod restarted
		var i atomic.Int64
		src := &funcSource{name: "v", fn: func(context.Context) (Reading, error) {
			n := min(int(i.Add(1))-1, len(counts)-1)
			return Reading{Counters: map[Signal]float64{PreemptionRate: counts[n]},
				GPUs: []GPUReading{{ID: "0", Counters: map[Signal]float64{AllocRetryRate: counts[n]}}}}, nil
		}}
		m := newMonitor(t, Settings{Smoothing: time.Nanosecond,
			Upstreams: []UpstreamSettings{{Name: "a", Sources: []SourceSettings{{Source: src}}}}})
		start(t, m)
		want := []float64{-1, 20, 20, 10, 20} // per second; -1: absent
		for k, w := range want {
			if k > 0 {
				time.Sleep(500 * time.Millisecond)
				synctest.Wait()
			}
			u := m.snapshot().Upstreams[0]
			for _, sig := range []Signal{PreemptionRate, AllocRetryRate} {
				v, ok := u.Signals[sig]
				if (w < 0) == ok || (ok && v.Value != w) {
					t.Errorf("read %d: %v = %v (present %v), want %v", k, sig, v.Value, ok, w)
				}
			}
		}
	})
}

func TestMonitorSignalsPerUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := &funcSource{name: "node", fn: func(context.Context) (Reading, error) {
			return Reading{GPUs: []GPUReading{
				{ID: "0", UUID: "GPU-a", Values: map[Signal]float64{MemoryUsed: 0.9}},
				{ID: "1", UUID: "GPU-b", Values: map[Signal]float64{MemoryUsed: 0.6}},
				{ID: "2", UUID: "GPU-c", Values: map[Signal]float64{MemoryUsed: 0.99}},
			}}, nil
		}}
		alloc := &funcSource{name: "alloc", fn: func(context.Context) (Reading, error) {
			return Reading{GPUs: []GPUReading{
				{ID: "0", Values: map[Signal]float64{Fragmentation: 1.25, MemoryUsed: 0.95, EffectiveUtilization: 0.9}},
				{ID: "1", Values: map[Signal]float64{Fragmentation: 2, MemoryUsed: 0.5, EffectiveUtilization: 0.7}},
			}}, nil
		}}
		var updates atomic.Int64
		m := newMonitor(t, Settings{
			Sources: []SourceSettings{{Kind: KindNVML, Source: node}},
			Upstreams: []UpstreamSettings{
				{Name: "a", GPUs: []string{"0", "GPU-b"}, Sources: []SourceSettings{{Kind: KindMemoryBlocks, Source: alloc}}},
				{Name: "b", GPUs: []string{"GPU-c"}},
				{Name: "c"},
			},
			OnUpdate: func(State) { updates.Add(1) },
		})
		start(t, m)
		s := m.snapshot()
		a, _ := s.Upstream("a")
		want := map[Signal]Value{
			Fragmentation:        {Value: 2, Source: "alloc", GPU: "1"},
			MemoryUsed:           {Value: 0.95, Source: "alloc", GPU: "0"}, // worse than nvml's 0.9
			EffectiveUtilization: {Value: 0.7, Source: "alloc", GPU: "1"},  // the lowest GPU
		}
		for sig, w := range want {
			v := a.Signals[sig]
			if v.Value != w.Value || v.Source != w.Source || v.GPU != w.GPU {
				t.Errorf("a: %v = %+v, want %+v", sig, v, w)
			}
		}
		if len(a.GPUs) != 2 || a.GPUs[0].UUID != "GPU-a" || a.GPUs[1].Signals[MemoryUsed].Value != 0.6 {
			t.Errorf("a.GPUs = %+v, want GPU 0 (GPU-a) and 1 with nvml's 0.6", a.GPUs)
		}
		if c, ok := a.GPUs[1].ClassicFragmentation(); !ok || c.Value != 0.5 {
			t.Errorf("ClassicFragmentation() = %v, %v, want 0.5", c, ok)
		}
		wantAbsent := []Signal{KVCacheUsage, PreemptionRate, Waiting, Running, AllocRetryRate, FragmentationGrowth, FreeMemory}
		if !slices.Equal(a.Absent, wantAbsent) {
			t.Errorf("a.Absent = %v, want %v", a.Absent, wantAbsent)
		}
		if b, _ := s.Upstream("b"); b.Signals[MemoryUsed].Value != 0.99 || len(b.GPUs) != 1 {
			t.Errorf("b = %+v, want GPU 2's memory_used only", b)
		}
		if c, _ := s.Upstream("c"); len(c.Signals) != 0 || len(c.Absent) != len(Signals()) {
			t.Errorf("c = %+v, want every signal absent", c)
		}
		if updates.Load() == 0 {
			t.Error("OnUpdate never called")
		}
		if got := []string{s.Sources[0].Name, s.Sources[1].Name}; !slices.Equal(got, []string{"node", "alloc"}) {
			t.Errorf("Sources = %v, want node, alloc", got)
		}
	})
}

// TestMonitorUpdates: OnUpdate follows the sources' rounds; a Monitor
// without sources still calls it every Interval (its caller's rounds go
// on); Notify asks for one more at once. Fake time (synctest).
func TestMonitorUpdates(t *testing.T) {
	for _, tt := range []struct {
		name    string
		sources []SourceSettings
		// updates is how many OnUpdate calls come within the first 2.25 s
		// (reads at 0, 0.5 … 2 s), then after a Notify.
		updates, afterNotify int64
	}{
		{"no source: every interval", nil, 4, 5},
		{"one source: after each report", []SourceSettings{{Source: kvSource("one", &atomic.Bool{})}}, 5, 6},
		// Two sources report twice per interval together: still one round
		// per interval (issue 36), not one per report.
		{"two sources: once per interval", []SourceSettings{{Source: kvSource("one", &atomic.Bool{})},
			{Source: kvSource("two", &atomic.Bool{})}}, 5, 6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var updates atomic.Int64
				m := newMonitor(t, Settings{Upstreams: []UpstreamSettings{{Name: "a", Sources: tt.sources}},
					OnUpdate: func(State) { updates.Add(1) }})
				start(t, m)
				time.Sleep(2250 * time.Millisecond) // fake time
				synctest.Wait()
				if got := updates.Load(); got != tt.updates {
					t.Fatalf("OnUpdate calls in 2.25 s = %d, want %d", got, tt.updates)
				}
				m.Notify()
				synctest.Wait()
				if got := updates.Load(); got != tt.afterNotify {
					t.Fatalf("OnUpdate calls after Notify = %d, want %d", got, tt.afterNotify)
				}
			})
		})
	}
}

func TestMonitorConcurrentSnapshots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fail atomic.Bool
		m := newMonitor(t, Settings{Jitter: 50 * time.Millisecond, Upstreams: []UpstreamSettings{{Name: "a",
			Sources: []SourceSettings{{Source: kvSource("one", &fail)}, {Source: kvSource("two", &fail)}}}}})
		start(t, m)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 100 {
					if g == 0 {
						fail.Store(i%3 == 0)
					}
					if s := m.snapshot(); len(s.Sources) != 2 {
						t.Errorf("Snapshot().Sources = %v", s.Sources)
					}
					time.Sleep(7 * time.Millisecond)
				}
			})
		}
		wg.Wait()
	})
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	fake := &funcSource{name: "x"}
	tests := []struct {
		name string
		s    Settings
		want []string // substrings of the error
	}{
		{"timeout not below interval", Settings{Interval: time.Second, Timeout: time.Second}, []string{"timeout"}},
		{"stale_after below interval", Settings{Interval: time.Second, StaleAfter: time.Millisecond}, []string{"stale_after"}},
		{"jitter not below interval", Settings{Jitter: time.Second}, []string{"jitter"}},
		{"bad upstreams and sources, all reported", Settings{
			Sources: []SourceSettings{{Kind: "gpu-magic"}, {Kind: KindVLLM, URL: "http://x/metrics"}},
			Upstreams: []UpstreamSettings{
				{Name: "a", Sources: []SourceSettings{{Kind: KindDCGM}, {Kind: KindMemoryBlocks, URL: "ftp://x"}}},
				{Name: "a"},
				{Name: "b", Sources: []SourceSettings{{Source: fake}, {Source: fake}}},
			}},
			[]string{`sources[0].kind "gpu-magic"`, `sources[1].kind "vllm": must be listed under an upstream`,
				`upstreams[0].sources[0].url ""`, `upstreams[0].sources[1].url "ftp://x"`,
				`upstreams[1].name "a"`, `upstreams[2].sources[1].name "x": already used`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tt.s)
			if err == nil {
				t.Fatal("New() = nil error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New() = %v, want it to mention %s", err, w)
				}
			}
		})
	}
}

func TestNewNamesSources(t *testing.T) {
	t.Parallel()
	m, err := New(Settings{
		Sources: []SourceSettings{{Kind: KindNVML}, {Kind: KindDCGM, URL: "http://127.0.0.1:9400/metrics"},
			{Kind: KindDCGM, URL: "http://127.0.0.1:9401/metrics"}},
		Upstreams: []UpstreamSettings{{Name: "vllm-0", Sources: []SourceSettings{
			{Kind: KindVLLM, URL: "http://127.0.0.1:8000/metrics"},
			{Kind: KindMemoryBlocks, URL: "http://127.0.0.1:8000/v1/internal/metrics", Name: "alloc"}}}},
	})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	var got []string
	for _, s := range m.snapshot().Sources {
		got = append(got, s.Name+":"+string(s.Kind)+":"+s.Upstream)
	}
	want := []string{"nvml:nvml:", "dcgm:dcgm:", "dcgm#2:dcgm:", "vllm-0/vllm:vllm:vllm-0", "alloc:memory_blocks:vllm-0"}
	if !slices.Equal(got, want) {
		t.Errorf("sources = %v, want %v", got, want)
	}
}

// TestMonitorRoundWaitsForEverySource: a round ends when the last source of
// the interval has reported; Notify's round comes at once.
func TestMonitorRoundWaitsForEverySource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var updates atomic.Int64
		slow := &funcSource{name: "slow", fn: func(ctx context.Context) (Reading, error) {
			select { // answers 300ms into each read
			case <-time.After(300 * time.Millisecond):
				return Reading{Values: map[Signal]float64{KVCacheUsage: 0.5}}, nil
			case <-ctx.Done():
				return Reading{}, ctx.Err()
			}
		}}
		m := newMonitor(t, Settings{Upstreams: []UpstreamSettings{{Name: "a", Sources: []SourceSettings{
			{Source: kvSource("fast", &atomic.Bool{})}, {Kind: KindVLLM, Source: slow}}}},
			OnUpdate: func(State) { updates.Add(1) }})
		start(t, m)
		if got := updates.Load(); got != 0 {
			t.Fatalf("OnUpdate calls before the slow source's first answer = %d, want 0", got)
		}
		time.Sleep(400 * time.Millisecond) // the slow source answered at 300ms
		synctest.Wait()
		if got := updates.Load(); got != 1 {
			t.Fatalf("OnUpdate calls after both answered = %d, want 1", got)
		}
		m.Notify() // an immediate round, whatever the sources
		synctest.Wait()
		if got := updates.Load(); got != 2 {
			t.Fatalf("OnUpdate calls after Notify = %d, want 2", got)
		}
	})
}
