package breaker

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestLimiterSetSteps(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	one := LimiterSettings{QPS: 1, Burst: 1, Now: clk.Now}
	two := LimiterSettings{QPS: 1, Burst: 2, Now: clk.Now}
	var ls LimiterSet // the zero value holds no keys
	// Each step advances the clock, calls Set when set is not nil, then
	// Allow(key): want is "ok" or the refusing scope ("global").
	steps := []struct {
		advance time.Duration
		set     map[string]LimiterSettings
		key     string
		want    string
	}{
		{key: "a", want: "ok"}, // no keys yet: everything passes
		{set: map[string]LimiterSettings{"a": one}, key: "a", want: "ok"},
		{key: "a", want: "global"},
		{key: "b", want: "ok"},                                                          // a key without a Limiter passes
		{set: map[string]LimiterSettings{"a": one, "b": one}, key: "a", want: "global"}, // a kept key keeps its empty bucket
		{key: "b", want: "ok"},
		{key: "b", want: "global"},
		{advance: time.Second, key: "a", want: "ok"},
		{set: map[string]LimiterSettings{"a": two}, key: "a", want: "global"}, // updated in place: no refill
		{advance: 2 * time.Second, key: "a", want: "ok"},
		{key: "a", want: "ok"}, // the new burst of 2
		{key: "a", want: "global"},
		{key: "b", want: "ok"},                                            // dropped: passes
		{set: map[string]LimiterSettings{"b": one}, key: "b", want: "ok"}, // back: a fresh, full bucket
		{key: "a", want: "ok"},
		{set: map[string]LimiterSettings{}, key: "b", want: "ok"},
	}
	for i, st := range steps {
		clk.Advance(st.advance)
		if st.set != nil {
			if err := ls.Set(st.set); err != nil {
				t.Fatalf("step %d: Set() = %v", i, err)
			}
		}
		err := ls.Allow(t.Context(), st.key)
		got := "ok"
		var le *LimitError
		if errors.As(err, &le) {
			got = le.Scope.String()
		} else if err != nil {
			t.Fatalf("step %d: Allow(%q) = %v, want nil or *LimitError", i, st.key, err)
		}
		if got != st.want {
			t.Errorf("step %d: Allow(%q) = %v (%s), want %s", i, st.key, err, got, st.want)
		}
	}
}

func TestLimiterSetRejectsInvalidSettings(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	var ls LimiterSet
	if err := ls.Set(map[string]LimiterSettings{"a": {QPS: 1, Burst: 1, Now: clk.Now}}); err != nil {
		t.Fatal(err)
	}
	bad := map[string]LimiterSettings{"a": {QPS: 5, Now: clk.Now}, "b": {QPS: -1}}
	if err := CheckLimiterSet(bad); err == nil || !strings.Contains(err.Error(), "LimiterSettings.QPS") {
		t.Errorf("CheckLimiterSet(QPS -1) = %v, want an error naming LimiterSettings.QPS", err)
	}
	if err := ls.Set(bad); err == nil || !strings.Contains(err.Error(), "LimiterSettings.QPS") {
		t.Errorf("Set(QPS -1) = %v, want an error naming LimiterSettings.QPS", err)
	}
	// Nothing changed: "a" still has its burst of 1.
	if err := ls.Allow(t.Context(), "a"); err != nil {
		t.Fatalf("Allow(a) = %v, want nil", err)
	}
	if err := ls.Allow(t.Context(), "a"); err == nil {
		t.Error("Allow(a) after a refused Set = nil, want the old bucket's refusal")
	}
	if err := CheckLimiterSet(nil); err != nil {
		t.Errorf("CheckLimiterSet(nil) = %v, want nil", err)
	}
}

// TestLimiterSetConcurrent hammers Allow while Set keeps swapping the set:
// on a frozen clock the kept keys admit exactly their bursts, however many
// Sets ran meanwhile.
func TestLimiterSetConcurrent(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	kept := map[string]LimiterSettings{
		"a": {QPS: 1, Burst: 50, Now: clk.Now},
		"b": {QPS: 1, Burst: 30, Now: clk.Now},
	}
	withC := map[string]LimiterSettings{"a": kept["a"], "b": kept["b"], "c": {QPS: 1, Burst: 1, Now: clk.Now}}
	var ls LimiterSet
	if err := ls.Set(kept); err != nil {
		t.Fatal(err)
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				key := []string{"a", "b", "c"}[(g+i)%3]
				if err := ls.Allow(t.Context(), key); err == nil && key != "c" {
					admitted.Add(1)
				}
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for i := range 200 {
				s := kept
				if i%2 == 0 {
					s = withC
				}
				if err := ls.Set(s); err != nil {
					t.Errorf("Set() = %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 80 {
		t.Fatalf("a and b admitted %d on a frozen clock, want their bursts 50 + 30 = 80", got)
	}
}
