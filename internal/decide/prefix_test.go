package decide

import (
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/route"
)

// scoredRig is the core over the real queue with route's Router as its
// scorer (prefix 3, load 2, KV 2, memory 2: KServe/llm-d's weights, the
// defaults before the replay's fit) and pods a and b, windows of 10.
type scoredRig struct {
	t      testing.TB
	core   *Core
	q      *queue.Queue
	router *route.Router
	reg    *pods.Registry
	lv     *levels
}

func newScoredRig(t testing.TB, names ...string) *scoredRig {
	t.Helper()
	q, err := queue.New(queue.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	r := &scoredRig{t: t, q: q, lv: &levels{critical: map[string]bool{}}}
	if r.router, err = route.New(route.Settings{Weights: route.Weights{Prefix: 3, Load: 2, KV: 2, Memory: 2}}); err != nil {
		t.Fatal(err)
	}
	r.reg = pods.New(r.lv)
	var ps []pods.Pod
	for i, name := range names {
		u, _ := url.Parse("http://10.0.0." + strconv.Itoa(i+1) + ":8000")
		ps = append(ps, pods.Pod{Name: name, URL: u, Gate: &gate{}})
		q.SetWindow(name, 10)
	}
	r.reg.Set(ps)
	q.SetAvailability(r.reg.Published)
	q.SetScorer(r.router)
	if r.core, err = New(Options{Registry: r.reg, Admission: Queue(q), Policy: Policy{Prefix: true}}); err != nil {
		t.Fatal(err)
	}
	return r
}

// hold takes n slots on pod and returns their release.
func (r *scoredRig) hold(pod string, n int) func() {
	r.t.Helper()
	var exclude []string
	for _, m := range r.reg.List() {
		if m.Name != pod {
			exclude = append(exclude, m.Name)
		}
	}
	s := r.q.TryAcquire(queue.Request{Seqs: n, Exclude: exclude})
	if s == nil || s.Upstream() != pod {
		r.t.Fatalf("could not hold %d slots on %s", n, pod)
	}
	return s.Release
}

// system is a system prompt of several whole prefix blocks, shared by
// every conversation below.
var system = strings.Repeat("You are a careful assistant for the billing team. ", 12)

func conversation(question string) string {
	return `{"model":"m","max_tokens":16,"messages":[{"role":"system","content":"` + system +
		`"},{"role":"user","content":"` + question + `"}]}`
}

// TestPodChoiceSteps: a request whose prefix a pod served goes back to that
// pod while both have room; a critical pod is never chosen, however good
// its prefix; load and KV usage outweigh a prefix on a pod that is nearly
// full.
func TestPodChoiceSteps(t *testing.T) {
	t.Parallel()
	r := newScoredRig(t, "a", "b")
	var held []func()
	defer func() {
		for _, f := range held {
			f()
		}
	}()
	steps := []struct {
		name string
		do   func()
		body string
		want string
	}{
		{"first: equal scores, the most room, then the name", func() {}, conversation("What is my balance?"), "a"},
		{"same prefix, a busier: back to a", func() { held = append(held, r.hold("a", 3)) }, conversation("Why was I charged twice?"), "a"},
		{"another prefix, a busier: b", func() {}, `{"model":"m","messages":[{"role":"user","content":"` +
			strings.Repeat("Translate this poem into French, keeping the rhyme. ", 4) + `"}]}`, "b"},
		{"a nearly full (window, own queue, KV): b, though it lacks the prefix", func() {
			held = append(held, r.hold("a", 5)) // 8 of 10
			r.router.SetPod("a", route.Pod{Waiting: 2, KVUsage: 0.95, Memory: 0.5})
			r.router.SetPod("b", route.Pod{Waiting: 0, KVUsage: 0.3, Memory: 0.5})
		}, conversation("Can I pay by card?"), "b"},
		{"a drained: its prefix brings it back", func() {
			for _, f := range held {
				f()
			}
			held = nil
			r.router.SetPod("a", route.Pod{Waiting: 0, KVUsage: 0.3, Memory: 0.5})
		}, conversation("Thanks!"), "a"},
		{"a critical: never a, however good its prefix", func() { r.lv.set("a", true); r.reg.Refresh() }, conversation("Refund?"), "b"},
	}
	for _, s := range steps {
		s.do()
		req := new(Request)
		res := r.core.Decide(t.Context(), req, chat(s.body, nil))
		if res.Admitted == nil {
			t.Fatalf("%s: not admitted: %+v", s.name, res.Refusal)
		}
		if got := res.Admitted.Pod.Name; got != s.want {
			t.Errorf("%s: went to %s, want %s", s.name, got, s.want)
		}
		if len(req.Prefix) == 0 {
			t.Errorf("%s: no prefix blocks with two pods", s.name)
		}
		res.Admitted.Done(pods.Success)
		res.Admitted.Slot.Release()
	}
}

// TestPrefixOnlyWithAChoice: one pod, or scoring without a prefix weight,
// computes no blocks.
func TestPrefixOnlyWithAChoice(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		pods   []string
		prefix bool
		want   bool
	}{
		{"two pods", []string{"a", "b"}, true, true},
		{"one pod", []string{"a"}, true, false},
		{"no prefix weight", []string{"a", "b"}, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newScoredRig(t, tt.pods...)
			r.core.SetPolicy(Policy{Prefix: tt.prefix})
			req := new(Request)
			res := r.core.Decide(t.Context(), req, chat(conversation("Hi"), nil))
			if res.Admitted == nil {
				t.Fatalf("not admitted: %+v", res.Refusal)
			}
			defer res.Admitted.Slot.Release()
			if got := req.Prefix != nil; got != tt.want {
				t.Errorf("prefix blocks computed = %v (%d), want %v", got, len(req.Prefix), tt.want)
			}
		})
	}
}
