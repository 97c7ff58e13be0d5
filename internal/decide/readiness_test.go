package decide

import (
	"errors"
	"testing"
)

// TestReadinessAndDrain steps the core through readiness and a shutdown's
// two steps: each row acts, then states what Unready, Draining and a new
// request must show.
func TestReadinessAndDrain(t *testing.T) {
	t.Parallel()
	var extra error
	r := newRig(t, Policy{})
	r.opts.Ready = func() error { return extra }
	r.build()
	steps := []struct {
		name     string
		act      func()
		unready  string
		draining bool
		request  string // what a new request gets: "admitted", "draining"; "" sends none
	}{
		{name: "ready", act: func() {}, request: "admitted"},
		{name: "a pod critical: the other takes work", act: func() { r.lv.set("a", true) }},
		{name: "every pod critical", act: func() { r.lv.set("b", true) }, unready: "no upstream can take work"},
		{name: "the pods recover", act: func() { r.lv.set("a", false); r.lv.set("b", false) }},
		{name: "Options.Ready's condition fails", act: func() { extra = errors.New("no share of any pod's window yet") },
			unready: "no share of any pod's window yet"},
		{name: "it holds again", act: func() { extra = nil }},
		{name: "step one: unready, still admitting", act: func() { r.core.StartDrain() }, unready: "draining", draining: true,
			request: "admitted"},
		{name: "draining comes before every other reason", act: func() { r.lv.set("a", true); r.lv.set("b", true) },
			unready: "draining", draining: true},
		{name: "step two: new work refused", act: func() { r.lv.set("a", false); r.lv.set("b", false); r.core.Drain() },
			unready: "draining", draining: true, request: "draining"},
	}
	for i, s := range steps {
		s.act()
		if got := r.core.Unready(); got != s.unready {
			t.Errorf("step %d (%s): Unready() = %q, want %q", i, s.name, got, s.unready)
		}
		if got := r.core.Draining(); got != s.draining {
			t.Errorf("step %d (%s): Draining() = %v, want %v", i, s.name, got, s.draining)
		}
		if s.request == "" {
			continue // what a request gets for the other reasons is TestDecide's
		}
		req, res := r.decide(t.Context(), chat(chatBody, nil))
		switch {
		case s.request == "draining" && (res.Refusal == nil || res.Refusal.Reason != ReasonDraining):
			t.Errorf("step %d (%s): Decide = %+v, want 503 draining", i, s.name, res)
		case s.request == "admitted" && res.Admitted == nil:
			t.Errorf("step %d (%s): Decide = %+v, want admitted", i, s.name, res)
		case res.Admitted != nil:
			r.finish(req, res.Admitted, End{Status: 200})
		}
	}
	r.settled()
}
