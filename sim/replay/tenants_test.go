package replay

import (
	"slices"
	"testing"
	"time"
)

// A TenantTrace merges its tenants' arrivals in time order, each at its
// rate, and a tenant's arrivals do not depend on who else is in the trace.
func TestTenantTrace(t *testing.T) {
	t.Parallel()
	ts := TraceSettings{Duration: 10 * time.Minute, BaseQPS: 5, BurstQPS: 5, Seed: 3}
	drain := func(shares []TenantShare) map[string][]Arrival {
		tt, err := NewTenantTrace(ts, shares)
		if err != nil {
			t.Fatal(err)
		}
		if names := tt.Tenants(); len(names) != len(shares) || !slices.Equal(tt.Classes(), []string{"short", "long"}) {
			t.Fatalf("Tenants() = %v, Classes() = %v", names, tt.Classes())
		}
		out := map[string][]Arrival{}
		last := time.Duration(-1)
		for a, ok := tt.Next(); ok; a, ok = tt.Next() {
			if a.At < last {
				t.Fatalf("arrival at %v after %v: not in time order", a.At, last)
			}
			last = a.At
			out[a.Tenant] = append(out[a.Tenant], a)
		}
		return out
	}
	both := drain([]TenantShare{{Name: "heavy", Rate: 10}, {Name: "light", Rate: 1}})
	alone := drain([]TenantShare{{Name: "light", Rate: 1}})
	if !slices.Equal(both["light"], alone["light"]) {
		t.Fatalf("light's arrivals differ beside heavy (%d) and alone (%d)", len(both["light"]), len(alone["light"]))
	}
	// 10 min at 5 and 50 QPS: ≈ 3 000 and 30 000.
	if n, h := len(both["light"]), len(both["heavy"]); n < 2700 || n > 3300 || h < 28500 || h > 31500 {
		t.Fatalf("%d light and %d heavy arrivals, want ≈ 3 000 and 30 000", n, h)
	}
	for _, bad := range [][]TenantShare{nil, {{Name: "", Rate: 1}}, {{Name: "a", Rate: 0}}, {{Name: "a", Rate: 1}, {Name: "a", Rate: 2}}} {
		if _, err := NewTenantTrace(ts, bad); err == nil {
			t.Errorf("NewTenantTrace(%+v) = nil error", bad)
		}
	}
	if _, err := NewTenantTrace(TraceSettings{BaseQPS: -1}, []TenantShare{{Name: "a", Rate: 1}}); err == nil {
		t.Error("NewTenantTrace(BaseQPS -1) = nil error")
	}
}

// A request's TTFT parts add up to its TTFT, and the tail is the mean of
// each part over the slowest ceil(1 %).
func TestTTFTParts(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	rq := &request{a: Arrival{At: 100 * ms}, start: 300 * ms, sent: 450 * ms, scheduled: 700 * ms, firstToken: 760 * ms}
	want := TTFTParts{TTFT: 660 * ms, Retry: 200 * ms, Queue: 150 * ms, Pod: 250 * ms, Prefill: 60 * ms}
	if got := rq.ttftParts(); got != want {
		t.Fatalf("ttftParts() = %+v, want %+v", got, want)
	}
	if p := want; p.Retry+p.Queue+p.Pod+p.Prefill != p.TTFT {
		t.Fatalf("parts %+v do not add up", p)
	}
	rq.scheduled = 0 // scheduled at the engine's time 0: counted from when it was sent
	if got := rq.ttftParts(); got.Pod != 0 || got.Prefill != 310*ms {
		t.Fatalf("ttftParts() with no schedule time = %+v, want no pod wait and 310ms prefill", got)
	}
	var ps []TTFTParts
	for i := range 150 { // the slowest ceil(1.5) = 2: TTFTs 149 and 148 ms
		d := time.Duration(i) * ms
		ps = append(ps, TTFTParts{TTFT: d, Queue: d / 2, Prefill: d - d/2})
	}
	if got := tail(ps); got != (TTFTParts{TTFT: 148500 * time.Microsecond, Queue: 74250 * time.Microsecond, Prefill: 74250 * time.Microsecond}) {
		t.Fatalf("tail = %+v", got)
	}
	if got := tail(nil); got != (TTFTParts{}) {
		t.Fatalf("tail(nil) = %+v, want zero", got)
	}
}
