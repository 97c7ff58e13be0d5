package admin

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

var testTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeSources are two pods: a, degraded by fragmentation with its error
// breaker half-open and a request waiting for it; b, without an error
// breaker and unknown to the controller.
func fakeSources() Sources {
	cfg, err := config.Parse([]byte(`upstreams:
  - {name: a, url: "http://a:8000", max_inflight: 8, min_inflight: 2}
  - {name: b, url: "http://b:8000"}
`))
	if err != nil {
		panic(err) // the test's own policy
	}
	frag := pressure.Value{Value: 1.3, Source: "a/alloc", GPU: "0", At: testTime, Age: time.Second}
	return Sources{
		Version:  "v1",
		Config:   func() *config.Config { return cfg },
		Ready:    func() bool { return true },
		Draining: func() bool { return false },
		Queue: func() queue.Stats {
			return queue.Stats{Length: 1, Tokens: 42, Order: queue.ShortestFirst,
				Windows: []queue.WindowStats{{Name: "a", Limit: 6, InFlight: 3}, {Name: "b", Limit: 256}}}
		},
		Upstreams: func() []pods.Status {
			return []pods.Status{{Name: "a", URL: "http://a:8000", Healthy: true},
				{Name: "b", URL: "http://b:8000", Healthy: true, Available: true}}
		},
		Breaker: func(name string) (breaker.State, bool) { return breaker.HalfOpen, name == "a" },
		Slow: func(name string) (breaker.SlowState, *control.Cause, bool) {
			if name != "a" {
				return breaker.SlowState{}, nil, false
			}
			return breaker.SlowState{Level: breaker.Degraded, Phase: breaker.PhaseDegraded, Limit: 6},
				&control.Cause{From: "normal", To: "degraded", Signal: "fragmentation", Source: "a/alloc", Value: 1.3, At: testTime}, true
		},
		LevelChanges: func() []control.LevelChange { // newest first
			return []control.LevelChange{
				{Upstream: "a", Cause: control.Cause{From: "normal", To: "degraded", Signal: "fragmentation", Source: "a/alloc", Value: 1.3, At: testTime}},
				{Upstream: "a", Cause: control.Cause{From: "degraded", To: "normal", Signal: "kv_cache_usage", Source: "a/vllm", Value: 0.5, Stale: true, At: testTime.Add(-time.Minute)}},
			}
		},
		Ceiling: func(name string) (int, time.Time) {
			if name == "a" { // a failed under load with 8 in flight
				return 6, testTime.In(time.FixedZone("CET", 3600))
			}
			return 0, time.Time{}
		},
		Pressure: func() pressure.State {
			return pressure.State{
				Upstreams: []pressure.UpstreamState{{Name: "a",
					Signals: map[pressure.Signal]pressure.Value{pressure.Fragmentation: frag},
					Absent:  []pressure.Signal{pressure.KVCacheUsage}}},
				Sources: []pressure.SourceState{{Name: "a/alloc", Up: true, LastSuccess: testTime}},
			}
		},
		Now: func() time.Time { return testTime.In(time.FixedZone("CET", 3600)) },
	}
}

// TestStateHandler pins the /admin/state document: the status page and
// operators' scripts read these names.
func TestStateHandler(t *testing.T) {
	t.Parallel()
	src := fakeSources()
	rec := httptest.NewRecorder()
	StateHandler(func() State { return Snapshot(src) }).ServeHTTP(rec, httptest.NewRequest("GET", "/admin/state", nil))
	if got := rec.Header().Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", got)
	}
	if got := rec.Header().Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store", got)
	}
	if got := rec.Body.String(); got != wantState {
		t.Errorf("body =\n%s\nwant\n%s", got, wantState)
	}
}

const wantState = `{
  "version": "v1",
  "mode": "enforce",
  "ready": true,
  "draining": false,
  "time": "2026-01-01T00:00:00Z",
  "upstreams": [
    {
      "name": "a",
      "url": "http://a:8000",
      "healthy": true,
      "breaker_open": false,
      "critical": false,
      "available": false,
      "breaker": "half-open",
      "window_limit": 6,
      "inflight": 3,
      "max_inflight": 8,
      "min_inflight": 2,
      "window_ceiling": 6,
      "window_ceiling_since": "2026-01-01T00:00:00Z",
      "level": "degraded",
      "phase": "degraded",
      "last_change": {
        "from": "normal",
        "to": "degraded",
        "signal": "fragmentation",
        "source": "a/alloc",
        "value": 1.3,
        "stale": false,
        "at": "2026-01-01T00:00:00Z"
      },
      "signals": {
        "fragmentation": {
          "value": 1.3,
          "source": "a/alloc",
          "gpu": "0",
          "at": "2026-01-01T00:00:00Z",
          "stale": false,
          "age_seconds": 1
        }
      },
      "absent": [
        "kv_cache_usage"
      ],
      "rules": {
        "alloc_retry_rate": {
          "degrade": 0.01
        },
        "fragmentation": {
          "degrade": 1.2,
          "shed": 1.5,
          "for": "2s"
        },
        "kv_cache_usage": {
          "degrade": 0.95
        }
      }
    },
    {
      "name": "b",
      "url": "http://b:8000",
      "healthy": true,
      "breaker_open": false,
      "critical": false,
      "available": true,
      "breaker": "none",
      "window_limit": 256,
      "inflight": 0,
      "max_inflight": 256,
      "min_inflight": 4,
      "level": "",
      "phase": "",
      "signals": null,
      "absent": null,
      "rules": {
        "alloc_retry_rate": {
          "degrade": 0.01
        },
        "fragmentation": {
          "degrade": 1.2,
          "shed": 1.5,
          "for": "2s"
        },
        "kv_cache_usage": {
          "degrade": 0.95
        }
      }
    }
  ],
  "queue": {
    "length": 1,
    "tokens": 42,
    "order": "shortest_first"
  },
  "limits": {
    "burst": 40,
    "qps": 80
  },
  "sources": [
    {
      "name": "a/alloc",
      "kind": "",
      "up": true,
      "last_success": "2026-01-01T00:00:00Z",
      "stale": false,
      "never_answered": false
    }
  ],
  "signal_units": {
    "alloc_retry_rate": "per second",
    "effective_utilization": "fraction 0–1",
    "fragmentation": "ratio ≥ 1",
    "fragmentation_growth": "per second",
    "free_memory_bytes": "bytes",
    "kv_cache_usage": "fraction 0–1",
    "memory_used": "fraction 0–1",
    "preemption_rate": "per second",
    "running": "requests",
    "waiting": "requests"
  },
  "level_changes": [
    {
      "upstream": "a",
      "from": "normal",
      "to": "degraded",
      "signal": "fragmentation",
      "source": "a/alloc",
      "value": 1.3,
      "stale": false,
      "at": "2026-01-01T00:00:00Z"
    },
    {
      "upstream": "a",
      "from": "degraded",
      "to": "normal",
      "signal": "kv_cache_usage",
      "source": "a/vllm",
      "value": 0.5,
      "stale": true,
      "at": "2025-12-31T23:59:00Z"
    }
  ]
}
`

func TestStateCollector(t *testing.T) {
	t.Parallel()
	src := fakeSources()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewStateCollector(func() State { return Snapshot(src) })); err != nil {
		t.Fatalf("Register() = %v", err)
	}
	const want = `
# HELP gatekeeper_error_breaker_state Error breaker state: 0 closed, 1 half-open, 2 open.
# TYPE gatekeeper_error_breaker_state gauge
gatekeeper_error_breaker_state{upstream="a"} 1
gatekeeper_error_breaker_state{upstream="b"} 0
# HELP gatekeeper_inflight Window slots held on the upstream now: the sequences of the requests running there (prompts × n each).
# TYPE gatekeeper_inflight gauge
gatekeeper_inflight{upstream="a"} 3
gatekeeper_inflight{upstream="b"} 0
# HELP gatekeeper_pressure_level Pressure level: 0 normal, 1 degraded, 2 critical.
# TYPE gatekeeper_pressure_level gauge
gatekeeper_pressure_level{upstream="a"} 1
gatekeeper_pressure_level{upstream="b"} 0
# HELP gatekeeper_queue_length Requests waiting for a window slot.
# TYPE gatekeeper_queue_length gauge
gatekeeper_queue_length 1
# HELP gatekeeper_queue_tokens Estimated tokens of the waiting requests.
# TYPE gatekeeper_queue_tokens gauge
gatekeeper_queue_tokens 42
# HELP gatekeeper_upstream_available 1 while the upstream may receive new dispatches.
# TYPE gatekeeper_upstream_available gauge
gatekeeper_upstream_available{upstream="a"} 0
gatekeeper_upstream_available{upstream="b"} 1
# HELP gatekeeper_window_ceiling The most the upstream's window may grow to since it failed under load (batch.failure_hold); 0 while none holds.
# TYPE gatekeeper_window_ceiling gauge
gatekeeper_window_ceiling{upstream="a"} 6
gatekeeper_window_ceiling{upstream="b"} 0
# HELP gatekeeper_window_limit The most requests the upstream may run at once (its batch window).
# TYPE gatekeeper_window_limit gauge
gatekeeper_window_limit{upstream="a"} 6
gatekeeper_window_limit{upstream="b"} 256
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func ExampleSnapshot() {
	src := fakeSources()
	s := Snapshot(src)
	for _, u := range s.Upstreams {
		fmt.Printf("%s: breaker %s, level %q, window %d/%d\n", u.Name, u.Breaker, u.Level, u.InFlight, u.WindowLimit)
	}
	fmt.Println("queue:", s.Queue.Length, s.Queue.Order)
	// Output:
	// a: breaker half-open, level "degraded", window 3/6
	// b: breaker none, level "", window 0/256
	// queue: 1 shortest_first
}

// TestMemoryAdmissionState: with vocab_size set and a memory budget on the
// window, /admin/state and /metrics show budget and held memory in bytes
// (the queue counts bytes per vocabulary entry).
func TestMemoryAdmissionState(t *testing.T) {
	t.Parallel()
	src := fakeSources()
	cfg, err := config.Parse([]byte(`upstreams:
  - {name: a, url: "http://a:8000", max_inflight: 8, min_inflight: 2, vocab_size: 1000}
  - {name: b, url: "http://b:8000"}
`))
	if err != nil {
		t.Fatal(err)
	}
	src.Config = func() *config.Config { return cfg }
	src.Queue = func() queue.Stats {
		return queue.Stats{Windows: []queue.WindowStats{{Name: "a", Limit: 6, InFlight: 3, MemoryBudget: 500, MemoryHeld: 96},
			{Name: "b", Limit: 256}}}
	}
	s := Snapshot(src)
	if a, b := s.Upstreams[0], s.Upstreams[1]; a.MemoryBudgetBytes != 500_000 || a.MemoryHeldBytes != 96_000 || b.MemoryBudgetBytes != 0 {
		t.Fatalf("a: budget %d held %d, b: budget %d; want 500000, 96000 and 0", a.MemoryBudgetBytes, a.MemoryHeldBytes, b.MemoryBudgetBytes)
	}
	want := `
# HELP gatekeeper_memory_budget_bytes Memory admission: the estimated memory the upstream's in-flight requests may hold (a share of the free memory it reports). Absent while it bounds nothing.
# TYPE gatekeeper_memory_budget_bytes gauge
gatekeeper_memory_budget_bytes{upstream="a"} 500000
# HELP gatekeeper_memory_held_bytes Memory admission: the estimated memory of the upstream's in-flight requests. Absent while it bounds nothing.
# TYPE gatekeeper_memory_held_bytes gauge
gatekeeper_memory_held_bytes{upstream="a"} 96000
`
	c := NewStateCollector(func() State { return Snapshot(src) })
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "gatekeeper_memory_budget_bytes", "gatekeeper_memory_held_bytes"); err != nil {
		t.Fatal(err)
	}
}
