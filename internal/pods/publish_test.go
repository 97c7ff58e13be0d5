package pods

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// transitions records BreakerChanged.
type transitions struct {
	mu  sync.Mutex
	got []string
}

func (tr *transitions) changed(pod string, from, to breaker.State) {
	tr.mu.Lock()
	tr.got = append(tr.got, pod+":"+from.String()+">"+to.String())
	tr.mu.Unlock()
}

func (tr *transitions) list() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.got...)
}

func withErrors(p Pod, s breaker.ErrorSettings) Pod {
	p.Errors = &s
	return p
}

// fail sends one request through the pod's gate and reports it failed.
func fail(t *testing.T, m *Member) {
	t.Helper()
	done, err := m.Gate.Allow()
	if err != nil {
		t.Fatalf("Allow() = %v", err)
	}
	done(Failure)
}

// The registry builds each pod's error breaker from its settings, keeps it
// across a Set that changes neither the name nor the settings (a new URL
// included), and builds a new one when they change.
func TestErrorBreakersKeptAcrossSet(t *testing.T) {
	t.Parallel()
	tr := &transitions{}
	r := NewWith(Options{BreakerChanged: tr.changed})
	s := breaker.ErrorSettings{Failures: 1, OpenFor: time.Hour}
	r.Set([]Pod{withErrors(pod("a", "http://10.0.0.1:8000", nil), s)})
	a, _ := r.Get("a")
	fail(t, a)
	if st, ok := r.BreakerState("a"); !ok || st != breaker.Open {
		t.Fatalf("BreakerState = %v %v, want open", st, ok)
	}
	if got := tr.list(); len(got) != 1 || got[0] != "a:closed>open" {
		t.Errorf("BreakerChanged heard %v, want a:closed>open", got)
	}
	r.Set([]Pod{withErrors(pod("a", "http://10.0.0.9:8000", nil), s)})
	if st, _ := r.BreakerState("a"); st != breaker.Open {
		t.Errorf("same settings, new URL: breaker %v, want still open", st)
	}
	if got := r.Published("a"); got != queue.Down {
		t.Errorf("kept open breaker: Published = %v, want down", got)
	}
	s.Failures = 2
	r.Set([]Pod{withErrors(pod("a", "http://10.0.0.9:8000", nil), s)})
	if st, _ := r.BreakerState("a"); st != breaker.Closed {
		t.Errorf("new settings: breaker %v, want a new, closed one", st)
	}
	if got := r.Published("a"); got != queue.Available {
		t.Errorf("new breaker: Published = %v, want available", got)
	}
	if _, ok := r.BreakerState("nope"); ok {
		t.Error("an unknown pod has no breaker")
	}
	r.Set([]Pod{pod("a", "http://10.0.0.9:8000", nil)})
	if _, ok := r.BreakerState("a"); ok {
		t.Error("no Errors: no breaker")
	}
}

// Settings the breaker refuses leave the pod without one, and say so.
func TestErrorBreakerInvalid(t *testing.T) {
	t.Parallel()
	var heard string
	r := NewWith(Options{BreakerInvalid: func(pod string, err error) { heard = pod }})
	r.Set([]Pod{withErrors(pod("a", "http://10.0.0.1:8000", nil), breaker.ErrorSettings{Failures: -1})})
	if _, ok := r.BreakerState("a"); ok || heard != "a" {
		t.Errorf("breaker kept %v, BreakerInvalid heard %q; want none, and a", ok, heard)
	}
	if got := r.Published("a"); got != queue.Available {
		t.Errorf("Published = %v, want available", got)
	}
}

// The snapshot follows the breaker without being asked: down when it
// opens, back once its open time has passed (no transition, no timer),
// paused while its probes are out, available when they close it.
func TestPublishedFollowsTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewWith(Options{})
		s := breaker.ErrorSettings{Failures: 2, OpenFor: 10 * time.Second, HalfOpenRequests: 1}
		r.Set([]Pod{withErrors(pod("a", "http://10.0.0.1:8000", nil), s)})
		a, _ := r.Get("a")
		check := func(want queue.Availability, why string) {
			t.Helper()
			if got := r.Published("a"); got != want {
				t.Errorf("%s: Published = %v, want %v", why, got, want)
			}
		}
		check(queue.Available, "fresh")
		fail(t, a)
		check(queue.Available, "one failure of two")
		fail(t, a)
		check(queue.Down, "open")
		time.Sleep(10 * time.Second)
		check(queue.Down, "open time not yet passed")
		time.Sleep(time.Nanosecond)
		check(queue.Available, "open time passed: a probe may go")
		done, err := a.Gate.Allow()
		if err != nil {
			t.Fatalf("probe refused: %v", err)
		}
		check(queue.Paused, "the one probe out")
		done(Success)
		check(queue.Available, "the probe closed it")
	})
}

// Health flips and level changes republish; observe mode pauses nothing.
func TestPublishedFollowsHealthAndLevels(t *testing.T) {
	t.Parallel()
	lv := levels{}
	r := New(lv)
	r.Set([]Pod{pod("a", "http://10.0.0.1:8000", nil)})
	a, _ := r.Get("a")
	a.ReportHealth(false, 1, 1)
	if got := r.Published("a"); got != queue.Down {
		t.Errorf("unhealthy: Published = %v, want down", got)
	}
	a.ReportHealth(true, 1, 1)
	lv["a"] = 2
	if got := r.Published("a"); got != queue.Available {
		t.Errorf("level changed, not yet refreshed: Published = %v, want available (the last published)", got)
	}
	r.Refresh()
	if got := r.Published("a"); got != queue.Paused {
		t.Errorf("critical after Refresh: Published = %v, want paused", got)
	}
	r.SetObserve(true)
	if got := r.Published("a"); got != queue.Available {
		t.Errorf("critical in observe mode: Published = %v, want available", got)
	}
	if got := r.Published("nope"); got != queue.Down {
		t.Errorf("unknown pod: Published = %v, want down", got)
	}
}

// A breaker whose open time passes while the pod is critical comes back
// paused, not available.
func TestPublishedOpenWhileCritical(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(levels{"a": 2})
		r.Set([]Pod{withErrors(pod("a", "http://10.0.0.1:8000", nil), breaker.ErrorSettings{Failures: 1, OpenFor: time.Second})})
		a, _ := r.Get("a")
		fail(t, a)
		time.Sleep(time.Second + time.Nanosecond)
		if got := r.Published("a"); got != queue.Paused {
			t.Errorf("open time passed while critical: Published = %v, want paused", got)
		}
	})
}

func BenchmarkPublished(b *testing.B) {
	r := New(levels{})
	r.Set([]Pod{withErrors(pod("a", "http://10.0.0.1:8000", nil), breaker.ErrorSettings{})})
	for b.Loop() {
		_ = r.Published("a")
	}
}

func BenchmarkAvailability(b *testing.B) {
	r := New(levels{})
	r.Set([]Pod{withErrors(pod("a", "http://10.0.0.1:8000", nil), breaker.ErrorSettings{})})
	for b.Loop() {
		_ = r.Availability("a")
	}
}
