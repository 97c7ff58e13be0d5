package control

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// policy is the shipped default with two pods, its fragmentation rule
// without for, so that one round moves a level.
func policy(t *testing.T) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(`
upstreams:
  - {name: a, url: "http://127.0.0.1:1", max_inflight: 100, min_inflight: 4}
  - {name: b, url: "http://127.0.0.1:2", max_inflight: 10, min_inflight: 2}
pressure:
  rules:
    fragmentation: {degrade: 1.2, shed: 1.5}
`))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// val is a fresh value from src; stale marks it stale.
func val(v float64, src string, stale bool) pressure.Value {
	return pressure.Value{Value: v, Source: src, Stale: stale}
}

// round builds a State from per-upstream signals.
func round(ups map[string]map[pressure.Signal]pressure.Value, sources ...pressure.SourceState) pressure.State {
	st := pressure.State{Sources: sources}
	for _, name := range []string{"a", "b"} {
		st.Upstreams = append(st.Upstreams, pressure.UpstreamState{Name: name, Signals: ups[name]})
	}
	return st
}

func describe(d Decision) string {
	var parts []string
	for _, c := range d.Upstreams {
		s := fmt.Sprintf("%s:%v/%v/%d", c.Name, c.Level, c.Phase, c.Limit)
		if c.LevelChanged {
			s += fmt.Sprintf(" [%s→%s %s=%g", c.Cause.From, c.Cause.To, c.Cause.Signal, c.Cause.Value)
			if c.Cause.Stale {
				s += " stale from " + c.Cause.Source
			}
			s += " hook " + string(c.Hook) + "]"
		}
		parts = append(parts, s)
	}
	s := strings.Join(parts, " ") + " order " + d.Order.String()
	if d.OrderChanged {
		s += "*"
	}
	return s
}

// TestControllerSteps runs the default policy through rounds of readings on
// an injected clock and states each decision.
func TestControllerSteps(t *testing.T) {
	t.Parallel()
	type step struct {
		advance time.Duration
		st      pressure.State
		want    string
	}
	type sigs = map[string]map[pressure.Signal]pressure.Value
	neverAnswered := pressure.SourceState{Name: "a/memory_blocks", Upstream: "a", Stale: true, NeverAnswered: true}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "a source that never answered holds nobody degraded", steps: []step{
			{st: round(sigs{"a": {pressure.KVCacheUsage: val(0.3, "a/vllm", false)}}, neverAnswered),
				want: "a:normal/normal/100 b:normal/normal/10 order fifo"},
			{advance: time.Minute, st: round(sigs{"a": {pressure.KVCacheUsage: val(0.3, "a/vllm", false)}}, neverAnswered),
				want: "a:normal/normal/100 b:normal/normal/10 order fifo"},
		}},
		{name: "a source gone quiet is named, with its last value", steps: []step{
			{st: round(sigs{"a": {pressure.KVCacheUsage: val(0.3, "a/vllm", false), pressure.Fragmentation: val(1.01, "a/memory_blocks", false)}}),
				want: "a:normal/normal/100 b:normal/normal/10 order fifo"},
			{advance: 3 * time.Second, st: round(sigs{"a": {pressure.KVCacheUsage: val(0.3, "a/vllm", true), pressure.Fragmentation: val(1.01, "a/memory_blocks", false)}}),
				want: "a:degraded/degraded/80 [normal→degraded kv_cache_usage=0.3 stale from a/vllm hook degraded] b:normal/normal/10 order shortest_first*"},
		}},
		{name: "a fresh crossing is named before a stale signal listed first", steps: []step{
			{st: round(sigs{"b": {pressure.Fragmentation: val(1.0, "b/memory_blocks", true), pressure.KVCacheUsage: val(0.97, "b/vllm", false)}}),
				want: "a:normal/normal/100 b:degraded/degraded/8 [normal→degraded kv_cache_usage=0.97 hook degraded] order shortest_first*"},
		}},
		{name: "critical, then back to normal through recovering", steps: []step{
			{st: round(sigs{"a": {pressure.Fragmentation: val(1.6, "a/memory_blocks", false)}}),
				want: "a:critical/critical/64 [normal→critical fragmentation=1.6 hook critical] b:normal/normal/10 order shortest_first*"},
			{advance: time.Second, st: round(sigs{"a": {pressure.Fragmentation: val(1.0, "a/memory_blocks", false)}}),
				want: "a:critical/critical/64 b:normal/normal/10 order shortest_first"},
			{advance: 5 * time.Second, st: round(sigs{"a": {pressure.Fragmentation: val(1.0, "a/memory_blocks", false)}}),
				want: "a:normal/recovering/64 [critical→normal fragmentation=1 hook recovered] b:normal/normal/10 order shortest_first"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := FromPolicy(policy(t))
			c, err := New(s)
			if err != nil {
				t.Fatal(err)
			}
			now := t0
			for i, st := range tt.steps {
				now = now.Add(st.advance)
				if got := describe(c.ObserveAt(now, st.st, true)); got != st.want {
					t.Fatalf("step %d: ObserveAt = %s,\nwant %s", i, got, st.want)
				}
			}
		})
	}
}

// TestCauseIsFinite: a stale reading without a value (NaN) never reaches the
// log, the metric or /admin/state as NaN.
func TestCauseIsFinite(t *testing.T) {
	t.Parallel()
	c, err := New(FromPolicy(policy(t)))
	if err != nil {
		t.Fatal(err)
	}
	d := c.ObserveAt(t0, round(map[string]map[pressure.Signal]pressure.Value{
		"a": {pressure.Fragmentation: val(math.NaN(), "a/memory_blocks", true)}}), true)
	ch := d.Upstreams[0]
	if !ch.LevelChanged || math.IsNaN(ch.Cause.Value) || ch.Cause.Source != "a/memory_blocks" || !ch.Cause.Stale {
		t.Fatalf("change = %+v, want a finite, stale cause from a/memory_blocks", ch)
	}
	if _, cause, _ := c.State("a"); cause == nil || cause.Value != 0 {
		t.Fatalf("State cause = %+v, want value 0", cause)
	}
}

// TestUpdate: a reload keeps each kept upstream's level and window, drops
// the rest, and an invalid one changes nothing.
func TestUpdate(t *testing.T) {
	t.Parallel()
	c, err := New(FromPolicy(policy(t)))
	if err != nil {
		t.Fatal(err)
	}
	c.ObserveAt(t0, round(map[string]map[pressure.Signal]pressure.Value{
		"a": {pressure.Fragmentation: val(1.6, "a/memory_blocks", false)}}), true)
	bad := FromPolicy(policy(t))
	bad.Upstreams = append(bad.Upstreams, Upstream{Name: "c", Slow: breaker.SlowSettings{}})
	if err := c.Update(bad); err == nil || !strings.Contains(err.Error(), "Upstreams[2] (c)") {
		t.Fatalf("Update(no MaxInflight) = %v, want an error naming Upstreams[2] (c)", err)
	}
	if err := c.Check(bad); err == nil {
		t.Fatal("Check(bad) = nil")
	}
	if !c.Critical("a") {
		t.Fatal("a failed update changed a's level")
	}
	next := FromPolicy(policy(t))
	next.Upstreams = next.Upstreams[:1]
	if err := c.Update(next); err != nil {
		t.Fatal(err)
	}
	if st, cause, ok := c.State("a"); !ok || st.Level != breaker.Critical || cause == nil {
		t.Fatalf("State(a) = %+v %+v %v after a reload, want critical with its cause", st, cause, ok)
	}
	if _, _, ok := c.State("b"); ok || c.Critical("b") {
		t.Fatal("b still known after a reload that dropped it")
	}
	if d := c.ObserveAt(t0.Add(time.Second), pressure.State{}, true); len(d.Upstreams) != 1 || d.Order != queue.ShortestFirst {
		t.Fatalf("ObserveAt after reload = %s", describe(d))
	}
}

// TestConcurrentUse hammers Observe, Critical, State, Changes, PodRefused
// and Update together.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	c, err := New(FromPolicy(policy(t)))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				v := 1.0 + float64((i+g)%7)/10
				c.ObserveAt(t0.Add(time.Duration(i)*time.Second), round(map[string]map[pressure.Signal]pressure.Value{
					"a": {pressure.Fragmentation: val(v, "a/memory_blocks", false)}}), i%2 == 0)
				_ = c.Critical("a")
				_, _, _ = c.State("b")
				_ = c.Changes()
				_ = c.podRefusedAt(t0.Add(time.Duration(i)*time.Millisecond), "b")
				if i%50 == 0 {
					_ = c.Update(FromPolicy(policy(t)))
				}
			}
		})
	}
	wg.Wait()
}

// TestFromPolicy maps rules in config.Signals order, a shed-only rule with an
// empty degraded band, and the batch keys.
func TestFromPolicy(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte(`
upstreams: [{name: a, url: "http://127.0.0.1:1", max_inflight: 64, min_inflight: 2}]
pressure:
  on_stale: ignore
  rules:
    waiting: {shed: 50}
    fragmentation: {degrade: 1.3, shed: 1.6}
batch: {cut: 0.5, worse_by: 0.03}
shed: {retry_after: 6s}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := FromPolicy(c)
	got := s.Upstreams[0].Slow
	var rules []string
	for _, r := range got.Level.Rules {
		rules = append(rules, fmt.Sprintf("%s %.4g/%g", r.Signal, r.Degrade, r.Shed))
	}
	want := "fragmentation 1.3/1.6; kv_cache_usage 0.95/0; waiting 50/50; alloc_retry_rate 0.01/0; pod_overload 3/0"
	if strings.Join(rules, "; ") != want || got.Level.OnStale != breaker.StaleIgnore ||
		got.Window.MaxInflight != 64 || got.Window.Cut != 0.5 || got.Window.Worsening != 0.03 {
		t.Fatalf("FromPolicy = %+v, rules %s\nwant rules %s", got, strings.Join(rules, "; "), want)
	}
	if r := got.Level.Rules[2]; !(r.Degrade < r.Shed) {
		t.Fatalf("shed-only rule %+v: degrade must sit just below shed", r)
	}
}

// TestPodRefusalsDegrade: a pod's own 503s degrade it (its window is cut)
// once three came within a second, counted by answer: the third asks for a
// round at once, a burst that came and went between two rounds far apart
// is still seen, refusals spread thinner than three a second are not, and
// the pod recovers after hold once they stop. Each step advances the fake
// clock, records refusals (or runs a round) and states what must hold.
func TestPodRefusalsDegrade(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	type step struct {
		advance time.Duration
		refuse  string // a refusal by this pod now ("": a round instead)
		kick    bool   // what PodRefusedAt must report
		want    string // the round's description, or a part of it after "~"
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"three within a second degrade at the third", []step{
			{0, "b", false, ""},
			{400 * ms, "b", false, ""},
			{0, "", false, "a:normal/normal/100 b:normal/normal/10 order fifo"},
			{500 * ms, "b", true, ""}, // the third within 900 ms: a round now
			{0, "", false, "a:normal/normal/100 b:degraded/degraded/8 [normal→degraded pod_overload=3 hook degraded] order shortest_first*"},
			{100 * ms, "b", false, ""}, // degraded already: no round asked for
			{0, "", false, "a:normal/normal/100 b:degraded/degraded/8 order shortest_first"},
			{time.Second, "", false, "a:normal/normal/100 b:degraded/degraded/8 order shortest_first"}, // none since: hold starts
			{5 * time.Second, "", false, "~b:normal/recovering/8 [degraded→normal pod_overload=0 hook recovered]"},
		}},
		{"a burst between two rounds far apart is seen", []step{
			{0, "", false, "a:normal/normal/100 b:normal/normal/10 order fifo"},
			{time.Second, "b", false, ""},
			{10 * ms, "b", false, ""},
			{10 * ms, "b", true, ""},
			{10 * ms, "nope", false, ""}, // unknown: ignored
			{3 * time.Second, "", false, "a:normal/normal/100 b:degraded/degraded/8 [normal→degraded pod_overload=3 hook degraded] order shortest_first*"},
		}},
		{"thinner than three a second: not degraded", []step{
			{0, "b", false, ""},
			{600 * ms, "b", false, ""},
			{600 * ms, "b", false, ""}, // the first has left the window
			{0, "", false, "a:normal/normal/100 b:normal/normal/10 order fifo"},
			{600 * ms, "b", false, ""},
			{600 * ms, "b", false, ""},
			{0, "", false, "a:normal/normal/100 b:normal/normal/10 order fifo"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := New(FromPolicy(policy(t)))
			if err != nil {
				t.Fatal(err)
			}
			now := t0
			for i, st := range tt.steps {
				now = now.Add(st.advance)
				if st.refuse != "" {
					if got := c.podRefusedAt(now, st.refuse); got != st.kick {
						t.Fatalf("step %d: PodRefusedAt(+%v, %s) = %v, want %v", i, now.Sub(t0), st.refuse, got, st.kick)
					}
					continue
				}
				got := describe(c.ObserveAt(now, round(nil), true))
				if want, part := strings.CutPrefix(st.want, "~"); part && !strings.Contains(got, want) || !part && got != want {
					t.Fatalf("step %d: round at +%v = %s,\nwant %s", i, now.Sub(t0), got, st.want)
				}
			}
		})
	}
}

// TestUpstreamRules: a pod's own rules merge over pressure.rules, {} removes
// one; the other pods keep the file's.
func TestUpstreamRules(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte(`
upstreams:
  - name: big
    url: "http://127.0.0.1:1"
    rules: {kv_cache_usage: {degrade: 0.8, shed: 0.9}, alloc_retry_rate: {}}
  - {name: small, url: "http://127.0.0.1:2"}
`))
	if err != nil {
		t.Fatal(err)
	}
	describeRules := func(s breaker.SlowSettings) string {
		var out []string
		for _, r := range s.Level.Rules {
			out = append(out, fmt.Sprintf("%s %.4g/%g", r.Signal, r.Degrade, r.Shed))
		}
		return strings.Join(out, "; ")
	}
	s := FromPolicy(c)
	if got, want := describeRules(s.Upstreams[0].Slow), "fragmentation 1.2/1.5; kv_cache_usage 0.8/0.9; pod_overload 3/0"; got != want {
		t.Errorf("big's rules = %s, want %s", got, want)
	}
	if got, want := describeRules(s.Upstreams[1].Slow), "fragmentation 1.2/1.5; kv_cache_usage 0.95/0; alloc_retry_rate 0.01/0; pod_overload 3/0"; got != want {
		t.Errorf("small's rules = %s, want %s", got, want)
	}
}

// TestPodFailedCaps: a pod that fails under load gets a window ceiling that
// the next round reports as a change; its own count of running requests
// (every replica's) counts when it is higher than this gatekeeper's share; a
// failure at a small load or of an unknown pod changes nothing.
func TestPodFailedCaps(t *testing.T) {
	t.Parallel()
	type step struct {
		advance  time.Duration
		running  float64 // vLLM's num_requests_running on a (0: no reading)
		failed   int     // > 0: a's error breaker opens with this many in flight
		lowered  bool    // what PodFailed reports
		want     string  // the round's decision for a
		changed  bool    // its LimitChanged
		wantCeil int
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"this gatekeeper's in-flight", []step{
			{want: "a:normal/normal/100"},
			{failed: 90, lowered: true, want: "a:normal/normal/72", changed: true, wantCeil: 72},
			{advance: time.Hour, want: "a:normal/normal/72", wantCeil: 72},
		}},
		{"the pod's own count is higher (other replicas)", []step{
			{running: 95, want: "a:normal/normal/100"},
			{failed: 40, lowered: true, want: "a:normal/normal/76", changed: true, wantCeil: 76},
		}},
		{"a small load is not the load's", []step{
			{running: 10, want: "a:normal/normal/100"},
			{failed: 12, want: "a:normal/normal/100"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			now := t0
			ctl, err := New(FromPolicy(policy(t)))
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range tc.steps {
				now = now.Add(st.advance)
				if st.failed > 0 {
					if got := ctl.PodFailedAt(now, "a", st.failed); got != st.lowered {
						t.Errorf("step %d: PodFailedAt(%d) = %v, want %v", i, st.failed, got, st.lowered)
					}
				}
				sig := map[string]map[pressure.Signal]pressure.Value{}
				if st.running > 0 {
					sig["a"] = map[pressure.Signal]pressure.Value{pressure.Running: val(st.running, "a/vllm", false)}
				}
				d := ctl.ObserveAt(now, round(sig), true)
				a := d.Upstreams[0]
				if got := strings.Fields(describe(d))[0]; got != st.want || a.LimitChanged != st.changed || a.Ceiling != st.wantCeil {
					t.Errorf("step %d: %s LimitChanged %v Ceiling %d, want %s, %v, %d", i, got, a.LimitChanged, a.Ceiling, st.want, st.changed, st.wantCeil)
				}
				if c, _ := ctl.Ceiling("a"); c != st.wantCeil {
					t.Errorf("step %d: Ceiling(a) = %d, want %d", i, c, st.wantCeil)
				}
			}
			if ctl.PodFailed("nope", 100) {
				t.Error("PodFailed(unknown) = true")
			}
		})
	}
}

// queue.order: earliest_deadline orders every queue by deadline in every
// phase; the default orders by arrival until a window is cut.
func TestDeadlineOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		order          config.QueueOrder
		calm, pressure queue.Order
	}{
		{config.OrderShortestFirst, queue.FIFO, queue.ShortestFirst},
		{config.OrderEarliestDeadline, queue.EarliestDeadline, queue.EarliestDeadline},
	} {
		c := policy(t)
		c.Queue.Order = tc.order
		ctl, err := New(FromPolicy(c))
		if err != nil {
			t.Fatal(err)
		}
		d := ctl.ObserveAt(t0, round(nil), true)
		if d.Order != tc.calm || d.Upstreams[0].Order != tc.calm {
			t.Errorf("%s, normal: order %v (a: %v), want %v", tc.order, d.Order, d.Upstreams[0].Order, tc.calm)
		}
		frag := map[string]map[pressure.Signal]pressure.Value{"a": {pressure.Fragmentation: val(1.3, "a/alloc", false)}}
		d = ctl.ObserveAt(t0.Add(time.Second), round(frag), true)
		if d.Order != tc.pressure || d.Upstreams[0].Order != tc.pressure || d.Upstreams[1].Order != tc.calm {
			t.Errorf("%s, a degraded: order %v (a: %v, b: %v), want %v (b: %v)", tc.order, d.Order,
				d.Upstreams[0].Order, d.Upstreams[1].Order, tc.pressure, tc.calm)
		}
	}
}

func TestLevelWindow(t *testing.T) {
	c, err := New(FromPolicy(config.Default()))
	if err != nil {
		t.Fatal(err)
	}
	name := config.Default().Upstreams[0].Name
	if level, window := c.LevelWindow(name); level != "normal" || window != config.Default().Upstreams[0].MaxInflight {
		t.Errorf("LevelWindow(%s) = %q, %d; want normal at max_inflight", name, level, window)
	}
	if level, window := c.LevelWindow("nope"); level != "" || window != 0 {
		t.Errorf("LevelWindow(unknown) = %q, %d; want \"\", 0", level, window)
	}
}
