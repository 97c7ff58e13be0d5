package decide

import (
	"net/url"
	"slices"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// The pods ranked after an admission are those that could take it now,
// never the one holding its slot, one that does not serve its model or one
// under critical pressure; over an Admission that is no Ranker, none.
func TestCoreRanked(t *testing.T) {
	t.Parallel()
	q, reg, core := rankRig(t, &levels{critical: map[string]bool{"d": true}},
		map[string]int{"a": 2, "b": 3, "c": 4, "d": 5, "e": 1}, "c") // c does not serve the request's "m"
	var req Request
	res := core.Decide(t.Context(), &req, chat(chatBody, nil))
	if res.Admitted == nil || res.Admitted.Pod.Name != "b" {
		t.Fatalf("Decide = %+v, want admitted on b (the most room it may use)", res)
	}
	defer res.Admitted.Slot.Release()
	got := core.Ranked(nil, &req, res.Admitted, 4)
	if want := []queue.Candidate{{Upstream: "a", Room: 2}, {Upstream: "e", Room: 1}}; !slices.Equal(got, want) {
		t.Fatalf("Ranked = %v, want %v", got, want)
	}
	if got := core.Ranked(nil, &req, res.Admitted, 0); len(got) != 0 {
		t.Fatalf("Ranked(n 0) = %v, want none", got)
	}
	plain, err := New(Options{Registry: reg, Admission: notRanker{Queue(q)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := plain.Ranked(nil, &req, res.Admitted, 4); len(got) != 0 {
		t.Fatalf("Ranked over an Admission that cannot rank = %v, want none", got)
	}
}

// notRanker hides the queue's Ranked.
type notRanker struct{ Admission }

// prefixScorer scores pod "far" by how many prefix blocks it is handed, and
// every other pod 0.
type prefixScorer struct{}

func (prefixScorer) Score(upstream string, _, _ int, prefix []uint64) float64 {
	if upstream == "far" {
		return float64(len(prefix))
	}
	return 0
}
func (prefixScorer) Chose(string, []uint64) {}

// The fallbacks are ranked for the request's own prefix blocks, as its pick was.
func TestCoreRankedPassesThePrefix(t *testing.T) {
	t.Parallel()
	q, _, core := rankRig(t, &levels{}, map[string]int{"big": 8, "mid": 4, "far": 1}, "")
	var req Request
	res := core.Decide(t.Context(), &req, chat(chatBody, nil))
	if res.Admitted == nil {
		t.Fatalf("Decide = %+v", res)
	}
	defer res.Admitted.Slot.Release()
	q.SetScorer(prefixScorer{})
	req.Prefix = []uint64{1, 2}
	got := core.Ranked(nil, &req, res.Admitted, 2)
	if len(got) != 2 || got[0].Upstream != "far" || got[0].Score != 2 {
		t.Fatalf("Ranked = %+v, want far first with score 2 (its prefix blocks passed on)", got)
	}
}

// rankRig is a core over a queue with a window per pod of the sizes given,
// each pod an upstream of the registry at lv's levels; the pod named other
// serves only the model "other".
func rankRig(t *testing.T, lv *levels, windows map[string]int, other string) (*queue.Queue, *pods.Registry, *Core) {
	t.Helper()
	q, err := queue.New(queue.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	reg := pods.New(lv)
	var ps []pods.Pod
	for name, window := range windows {
		u, _ := url.Parse("http://" + name + ":8000")
		p := pods.Pod{Name: name, URL: u}
		if name == other {
			p.Models = []string{"other"}
		}
		ps = append(ps, p)
		q.SetWindow(name, window)
	}
	reg.Set(ps)
	q.SetAvailability(reg.Availability)
	core, err := New(Options{Registry: reg, Admission: Queue(q)})
	if err != nil {
		t.Fatal(err)
	}
	return q, reg, core
}
