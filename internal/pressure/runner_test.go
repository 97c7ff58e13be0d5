package pressure

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/syncbuf"
)

// closeSource is a source that counts its reads and its Close, which
// returns closeErr. name comes first, so reflect.DeepEqual on two of them
// stops at differing names and never reads the counters.
type closeSource struct {
	name     string
	closeErr error
	reads    atomic.Int64
	closed   atomic.Int64
}

func (s *closeSource) Name() string { return s.name }

func (s *closeSource) Read(context.Context) (Reading, error) {
	s.reads.Add(1)
	return Reading{Values: map[Signal]float64{KVCacheUsage: 0.5}}, nil
}

func (s *closeSource) Close() error {
	s.closed.Add(1)
	return s.closeErr
}

func runnerSettings(src Source) Settings {
	return Settings{Jitter: -1, Upstreams: []UpstreamSettings{{Name: "a", Sources: []SourceSettings{{Kind: KindVLLM, Source: src}}}}}
}

func TestRunnerReplacesOnlyOnChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var updates atomic.Int64
		r := NewRunner(RunnerSettings{OnUpdate: func(State) { updates.Add(1) }})
		if s := r.Snapshot(); len(s.Sources) != 0 {
			t.Fatalf("Snapshot() before Start = %+v, want empty", s)
		}
		r.Notify() // before Start: nothing to ask
		r.Start(t.Context())
		one, two := &closeSource{name: "one"}, &closeSource{name: "two"}
		s1 := runnerSettings(one)
		if err := r.Apply(s1); err != nil {
			t.Fatalf("Apply() = %v", err)
		}
		synctest.Wait()
		if got := r.Snapshot(); len(got.Sources) != 1 || got.Sources[0].Name != "one" || updates.Load() == 0 {
			t.Fatalf("after Apply: Snapshot().Sources = %+v, updates %d; want source one and an update", got.Sources, updates.Load())
		}
		before := updates.Load()
		r.Notify() // the running monitor's: one more update at once
		synctest.Wait()
		if got := updates.Load(); got != before+1 {
			t.Fatalf("updates after Notify = %d, want %d", got, before+1)
		}

		// The same settings: nothing to build, the running monitor stays.
		if m, err := r.Prepare(s1); m != nil || err != nil {
			t.Errorf("Prepare(same settings) = %v, %v; want nil, nil", m, err)
		}
		if err := r.Apply(s1); err != nil || one.closed.Load() != 0 {
			t.Errorf("Apply(same settings) = %v, closed %d; want nil and the monitor kept", err, one.closed.Load())
		}

		// Invalid settings: an error, and the running monitor stays.
		bad := runnerSettings(two)
		bad.Interval = -time.Second
		if m, err := r.Prepare(bad); m != nil || err == nil || !strings.Contains(err.Error(), "interval") {
			t.Errorf("Prepare(interval -1s) = %v, %v; want an error naming interval", m, err)
		}

		// Prepare builds but starts nothing; Replace swaps, stopping the old one first.
		s2 := runnerSettings(two)
		m, err := r.Prepare(s2)
		if err != nil || m == nil {
			t.Fatalf("Prepare(new settings) = %v, %v; want a monitor", m, err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if two.reads.Load() != 0 || one.closed.Load() != 0 {
			t.Fatalf("after Prepare: reads of two %d, one closed %d; want nothing running changed", two.reads.Load(), one.closed.Load())
		}
		r.Replace(m, s2)
		synctest.Wait()
		if one.closed.Load() != 1 || two.reads.Load() == 0 {
			t.Errorf("after Replace: one closed %d, reads of two %d; want one stopped and two read", one.closed.Load(), two.reads.Load())
		}
		if got := r.Snapshot(); len(got.Sources) != 1 || got.Sources[0].Name != "two" {
			t.Errorf("after Replace: Snapshot().Sources = %+v, want source two", got.Sources)
		}
		r.Replace(nil, s1) // nil: keep the running one
		if two.closed.Load() != 0 {
			t.Error("Replace(nil) stopped the running monitor")
		}

		r.Stop()
		reads := two.reads.Load()
		time.Sleep(time.Second)
		synctest.Wait()
		if two.closed.Load() != 1 || two.reads.Load() != reads {
			t.Errorf("after Stop: two closed %d, reads %d → %d; want closed once and no more reads", two.closed.Load(), reads, two.reads.Load())
		}
		// Stopped: the same settings build a monitor again.
		if m, err := r.Prepare(s2); m == nil || err != nil {
			t.Errorf("Prepare(settings of a stopped monitor) = %v, %v; want a monitor", m, err)
		}
	})
}

func TestRunnerLogsFailedRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs syncbuf.Buffer
		r := NewRunner(RunnerSettings{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		r.Start(t.Context())
		src := &closeSource{name: "one", closeErr: errors.New("close failed")}
		if err := r.Apply(runnerSettings(src)); err != nil {
			t.Fatalf("Apply() = %v", err)
		}
		synctest.Wait()
		r.Stop()
		if out := logs.String(); !strings.Contains(out, `"level":"ERROR","msg":"pressure monitor stopped","err":"close failed"`) {
			t.Errorf("logs = %s, want the monitor's error", out)
		}
	})
}

// TestRunnerConcurrent hammers Snapshot while reloads replace the monitor.
func TestRunnerConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRunner(RunnerSettings{})
		r.Start(t.Context())
		defer r.Stop()
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 20 {
					src := &closeSource{name: "s" + string(rune('a'+g)) + string(rune('a'+i))}
					if err := r.Apply(runnerSettings(src)); err != nil {
						t.Errorf("Apply() = %v", err)
					}
					time.Sleep(30 * time.Millisecond)
				}
			})
		}
		for range 4 {
			wg.Go(func() {
				for range 100 {
					if s := r.Snapshot(); len(s.Sources) > 1 {
						t.Errorf("Snapshot().Sources = %+v, want at most one", s.Sources)
					}
					time.Sleep(7 * time.Millisecond)
				}
			})
		}
		wg.Wait()
	})
}

// TestRunnerWaitsForStart: a Monitor swapped in before Start reads nothing
// until Start, then runs under Start's context, as a later replacement does.
func TestRunnerWaitsForStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRunner(RunnerSettings{})
		one, two := &closeSource{name: "one"}, &closeSource{name: "two"}
		if err := r.Apply(runnerSettings(one)); err != nil {
			t.Fatalf("Apply() = %v", err)
		}
		if m, err := r.Prepare(runnerSettings(one)); m != nil || err != nil {
			t.Errorf("Prepare(the pending settings) = %v, %v; want nil, nil", m, err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if one.reads.Load() != 0 {
			t.Fatalf("reads before Start = %d, want 0", one.reads.Load())
		}
		ctx, cancel := context.WithCancel(t.Context())
		r.Start(ctx)
		r.Start(t.Context()) // once: a second call changes nothing
		synctest.Wait()
		if one.reads.Load() == 0 {
			t.Fatal("no read after Start")
		}
		if err := r.Apply(runnerSettings(two)); err != nil {
			t.Fatalf("Apply() = %v", err)
		}
		synctest.Wait()
		if one.closed.Load() != 1 || two.reads.Load() == 0 {
			t.Fatalf("after Apply: one closed %d, reads of two %d; want one stopped and two read", one.closed.Load(), two.reads.Load())
		}
		cancel() // Start's context ends: the replacement stops with it
		synctest.Wait()
		if two.closed.Load() != 1 {
			t.Errorf("after Start's context ended: two closed %d, want 1", two.closed.Load())
		}
	})
}
