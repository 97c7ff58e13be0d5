package pods

import (
	"encoding/json"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

type gateState struct {
	st   breaker.State
	busy bool // half-open with every probe out
	left time.Duration
}

func (g *gateState) Allow() (func(Result), error) { return func(Result) {}, nil }
func (g *gateState) Admits() (breaker.State, bool) {
	return g.st, g.st == breaker.Closed || g.st == breaker.HalfOpen && !g.busy
}
func (g *gateState) OpenRemaining() time.Duration { return g.left }

type levels map[string]int // 1 degraded, 2 critical

func (l levels) Critical(p string) bool { return l[p] >= 2 }
func (l levels) Degraded(p string) bool { return l[p] >= 1 }

func pod(name, raw string, g Gate) Pod {
	u, _ := url.Parse(raw)
	return Pod{Name: name, URL: u, Gate: g}
}

// Availability is decided when asked, from health, the error breaker and
// the pressure level; observe mode pauses nothing for pressure.
func TestAvailability(t *testing.T) {
	t.Parallel()
	g := &gateState{}
	lv := levels{}
	r := New(lv)
	r.Set([]Pod{pod("a", "http://10.0.0.1:8000", g), pod("b", "http://10.0.0.2:8000", nil)})
	a, _ := r.Get("a")
	check := func(want queue.Availability, why string) {
		t.Helper()
		if got := r.Availability("a"); got != want {
			t.Errorf("%s: Availability = %v, want %v", why, got, want)
		}
	}
	check(queue.Available, "fresh")
	g.st, g.busy = breaker.HalfOpen, true
	check(queue.Paused, "half-open with its probes out")
	g.st, g.busy = breaker.Open, false
	check(queue.Down, "breaker open")
	g.st = breaker.Closed
	lv["a"] = 2
	check(queue.Paused, "critical")
	r.SetObserve(true)
	check(queue.Available, "critical in observe mode")
	r.SetObserve(false)
	lv["a"] = 0
	if a.ReportHealth(false, 1, 2) {
		t.Fatal("one failure flipped a pod that needs two")
	}
	if !a.ReportHealth(false, 1, 2) {
		t.Fatal("the second failure did not flip it")
	}
	check(queue.Down, "unhealthy")
	if got := r.Availability("nope"); got != queue.Down {
		t.Errorf("unknown pod = %v, want down", got)
	}
	if !r.AnyAvailable() || r.AnyAvailable("b") {
		t.Error("AnyAvailable must see b and only b")
	}
	// A reload that keeps a pod's name and URL keeps its health.
	r.Set([]Pod{pod("a", "http://10.0.0.1:8000", g)})
	if a2, _ := r.Get("a"); a2.Healthy() {
		t.Error("the reload forgot a's failed health")
	}
	if removed := r.Set([]Pod{pod("a", "http://10.0.0.9:8000", g)}); len(removed) != 0 {
		t.Errorf("removed = %v", removed)
	}
	if a3, _ := r.Get("a"); !a3.Healthy() {
		t.Error("a new URL starts healthy")
	}
}

func TestRefusalFacts(t *testing.T) {
	t.Parallel()
	g := &gateState{st: breaker.Open, left: 3 * time.Second}
	lv := levels{"b": 2}
	r := New(lv)
	r.Set([]Pod{pod("a", "http://10.0.0.1:8000", g), pod("b", "http://10.0.0.2:8000", nil)})
	if !r.AllCritical() {
		t.Error("a down and b critical: every pod that could serve is critical")
	}
	if got := r.RetryAfter(time.Second, "b"); got != 3*time.Second {
		t.Errorf("RetryAfter = %v, want the open breaker's 3s", got)
	}
	if got := r.WhyDown("b"); got != "no upstream can take the request: every upstream failed recently (error breaker open)" {
		t.Errorf("WhyDown = %q", got)
	}
	lv["b"] = 1
	if !r.AllDegraded() || r.AllCritical() {
		t.Error("b degraded: all degraded, not all critical")
	}
}

func TestModels(t *testing.T) {
	t.Parallel()
	r := New(nil)
	a, b := pod("a", "http://10.0.0.1:8000", nil), pod("b", "http://10.0.0.2:8000", nil)
	a.Models = []string{"llama"}
	b.DiscoverModels = true
	r.Set([]Pod{a, b})
	if skip, served, unknown := r.NotServing("qwen"); served || unknown != 1 || len(skip) != 2 {
		t.Errorf("NotServing(qwen) = %v %v %d: b's list is unknown yet", skip, served, unknown)
	}
	if r.ModelsKnown() != true {
		t.Error("a knows its list")
	}
	mb, _ := r.Get("b")
	mb.SetDiscovered([]json.RawMessage{json.RawMessage(`{"id":"qwen","object":"model"}`)})
	if skip, served, _ := r.NotServing("qwen"); !served || len(skip) != 1 || skip[0] != "a" {
		t.Errorf("NotServing(qwen) = %v %v, want a skipped", skip, served)
	}
	if _, ok := r.SoleModel(); ok {
		t.Error("two models: no sole model")
	}
	if n := len(r.modelEntries()); n != 2 {
		t.Errorf("ModelEntries has %d, want 2", n)
	}
	c := pod("c", "http://10.0.0.3:8000", nil) // lists none: serves every model
	d := pod("d", "http://10.0.0.4:8000", nil) // not answered yet: serves none
	d.DiscoverModels = true
	r.Set([]Pod{a, b, c, d})
	mb, _ = r.Get("b")
	mb.SetDiscovered([]json.RawMessage{json.RawMessage(`{"id":"qwen"}`), json.RawMessage(`{"id":"llama"}`)})
	want := map[string][]string{"llama": {"a", "b", "c"}, "qwen": {"b", "c"}}
	if got := r.ModelPods(); !reflect.DeepEqual(got, want) {
		t.Errorf("ModelPods() = %v, want %v", got, want)
	}
	if got := New(nil).ModelPods(); got != nil {
		t.Errorf("ModelPods() without routing by model = %v, want nil", got)
	}
}

func TestEndpoint(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"http://10.0.0.1:8000": "10.0.0.1:8000", "http://10.0.0.1": "10.0.0.1:80",
		"https://[fd00::1]": "[fd00::1]:443", "http://[fd00::1]:8000/v1": "[fd00::1]:8000",
	} {
		if got := pod("p", raw, nil).Endpoint(); got != want {
			t.Errorf("Endpoint(%s) = %s, want %s", raw, got, want)
		}
	}
}
