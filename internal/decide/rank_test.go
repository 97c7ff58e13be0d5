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
	q, err := queue.New(queue.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	lv := &levels{critical: map[string]bool{"d": true}}
	reg := pods.New(lv)
	var ps []pods.Pod
	for name, window := range map[string]int{"a": 2, "b": 3, "c": 4, "d": 5, "e": 1} {
		u, _ := url.Parse("http://" + name + ":8000")
		p := pods.Pod{Name: name, URL: u}
		if name == "c" {
			p.Models = []string{"other"} // not the request's "m"
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
