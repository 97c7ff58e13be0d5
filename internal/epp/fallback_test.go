package epp

import (
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"testing/synctest"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// The pick's endpoints and scores reach Envoy in the envoy.lb metadata
// (and the list in the header), on the path of a body-less request and on
// that of a request with a body; a score that is not finite is left out.
func TestPickWritesScores(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFakeDecider(), Options{})
	want := map[string]float64{"10.0.0.1:8000": 1, "10.0.0.2:8000": 0.5, "10.0.0.3:8000": 1.0 / 3, "10.0.0.9:8000": 0.125}
	for _, body := range []bool{false, true} {
		e := h.open()
		length := ""
		if body {
			length = strconv.Itoa(len(chatBody))
			e.send(reqHeaders(false, "x-test", testScores), reqBody(chatBody, true))
		} else {
			e.send(reqHeaders(true, "x-test", testScores))
		}
		if got := e.pick(length); got != "10.0.0.1:8000,10.0.0.2:8000,10.0.0.3:8000" {
			t.Fatalf("body %v: pick = %q, want the three endpoints", body, got)
		}
		if !maps.Equal(e.scores, want) {
			t.Fatalf("body %v: scores = %v, want %v", body, e.scores, want)
		}
		if body {
			e.body(requestSide, len(chatBody), true)
		}
		e.send(respHeaders(true, ":status", "200"))
		e.recv()
		e.closed()
		h.dec.end(t)
	}
	h.dec.settled(t)
}

// rankScorer scores the picker's pods by a table for the queue.
type rankScorer map[string]float64

func (s rankScorer) Score(upstream string, _, _ int, _ []uint64) float64 { return s[upstream] }
func (rankScorer) Chose(string, []uint64)                                {}

// Over the real core, with routing scores: the pick is the best pod, then
// up to endpoint_picker.fallbacks next-best pods in score order; the scores
// cover every pod that could take the request. A pod under critical
// pressure is never named, first or fallback, nor scored; without scores
// (no routing scorer) none are written.
func TestCoreFallbacks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		fallbacks int
		scores    bool
		critical  string
		noScorer  bool
		want      string
		wantScore map[string]float64
	}{
		{name: "two fallbacks, scores", fallbacks: 2, scores: true, want: "10.0.0.1:8000,10.0.0.3:8000,10.0.0.2:8000",
			wantScore: map[string]float64{"10.0.0.1:8000": 0.875, "10.0.0.2:8000": 0.5, "10.0.0.3:8000": 0.75, "10.0.0.4:8000": 0.125}},
		{name: "no fallbacks", want: "10.0.0.1:8000"},
		{name: "more fallbacks than pods", fallbacks: 8, want: "10.0.0.1:8000,10.0.0.3:8000,10.0.0.2:8000,10.0.0.4:8000"},
		{name: "the best pod critical", fallbacks: 3, scores: true, critical: "a", want: "10.0.0.3:8000,10.0.0.2:8000,10.0.0.4:8000",
			wantScore: map[string]float64{"10.0.0.2:8000": 0.5, "10.0.0.3:8000": 0.75, "10.0.0.4:8000": 0.125}},
		{name: "a fallback critical", fallbacks: 3, critical: "c", want: "10.0.0.1:8000,10.0.0.2:8000,10.0.0.4:8000"},
		{name: "no scorer: by room, no scores", fallbacks: 1, scores: true, noScorer: true, want: "10.0.0.1:8000,10.0.0.2:8000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				cp := newCorePickerExtra(t, 4, breaker.LimiterSettings{}, decide.Policy{}, coreExtra{
					pods: []string{"a", "b", "c", "d"}, decider: CoreOptions{Fallbacks: tt.fallbacks, Scores: tt.scores}})
				if !tt.noScorer {
					cp.q.SetScorer(rankScorer{"a": 0.875, "b": 0.5, "c": 0.75, "d": 0.125})
				}
				if tt.critical != "" {
					cp.lv.mu.Lock()
					cp.lv.critical[tt.critical] = true
					cp.lv.mu.Unlock()
				}
				e := cp.open()
				chat(e)
				if got := e.pick(strconv.Itoa(len(chatBody))); got != tt.want {
					t.Fatalf("pick = %q, want %q", got, tt.want)
				}
				if !maps.Equal(e.scores, tt.wantScore) {
					t.Fatalf("scores = %v, want %v", e.scores, tt.wantScore)
				}
				e.body(requestSide, len(chatBody), true)
				if n := cp.held(); n != 1 {
					t.Fatalf("%d slots held, want the pick's one: fallbacks hold none", n)
				}
				e.send(respHeaders(true, ":status", "200"))
				e.recv()
				e.closed()
				synctest.Wait()
				if n := cp.held(); n != 0 {
					t.Fatalf("%d slots held after the response, want none", n)
				}
			})
		})
	}
}

// Over the real core, a response the gateway says a fallback served ends
// the request as the pick's: served, its slot given back.
func TestCoreServedByAFallback(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cp := newCorePickerExtra(t, 4, breaker.LimiterSettings{}, decide.Policy{}, coreExtra{decider: CoreOptions{Fallbacks: 1}})
		e := cp.open()
		chat(e)
		if got := e.pick(strconv.Itoa(len(chatBody))); got != "10.0.0.1:8000,10.0.0.2:8000" {
			t.Fatalf("pick = %q, want a then b", got)
		}
		e.body(requestSide, len(chatBody), true)
		e.send(served(respHeaders(true, ":status", "200"), "10.0.0.2:8000"))
		e.recv()
		e.closed()
		cp.settled(t)
		if n := cp.rec.get(decide.OutcomeServed); n != 1 {
			t.Fatalf("served = %d, want the request the fallback served", n)
		}
	})
}

// A response a fallback served counts against the pick's slot, with the
// pick's error breaker told of a failure; one the pick served is its own;
// one from an endpoint the pick did not name is counted as the pick's.
func TestServedBy(t *testing.T) {
	t.Parallel()
	d := NewCoreDecider(CoreOptions{}).(*coreDecider)
	endpoints := []string{"10.0.0.1:8000", "10.0.0.2:8000"}
	tests := []struct {
		served string
		want   pods.Result
	}{
		{"", pods.Success},
		{"10.0.0.1:8000", pods.Success},
		{"10.0.0.2:8000", pods.Failure},
		{"10.0.0.7:8000", pods.Success},
	}
	for _, tt := range tests {
		var heard []pods.Result
		adm := &decide.Admitted{Pod: &pods.Member{Pod: pods.Pod{Name: "a"}}, Done: func(r pods.Result) { heard = append(heard, r) }}
		got := d.servedBy(adm, endpoints, tt.served)
		got.Done(pods.Success)
		if len(heard) != 1 || heard[0] != tt.want || got.Pod != adm.Pod {
			t.Errorf("servedBy(%q): the pick's breaker heard %v, want [%v]", tt.served, heard, tt.want)
		}
	}
}

// held is how many slots the picker's pods hold in all.
func (cp *corePicker) held() int {
	n := 0
	for _, w := range cp.q.Stats().Windows {
		n += w.InFlight
	}
	return n
}

// BenchmarkEndpoints is what naming fallbacks and scores adds to a pick
// over the real core, in a pool of 16 pods: the ranking (the queue's lock
// and scorer included) and the lists.
func BenchmarkEndpoints(b *testing.B) {
	for _, o := range []CoreOptions{{}, {Fallbacks: 2}, {Fallbacks: 2, Scores: true}} {
		b.Run("fallbacks="+strconv.Itoa(o.Fallbacks)+",scores="+strconv.FormatBool(o.Scores), func(b *testing.B) {
			q, err := queue.New(queue.Settings{})
			if err != nil {
				b.Fatal(err)
			}
			reg := pods.New(&levels{critical: map[string]bool{}})
			var ps []pods.Pod
			scores := rankScorer{}
			for i := range 16 {
				name := "pod-" + strconv.Itoa(i)
				u, _ := url.Parse("http://10.0." + strconv.Itoa(i) + ".1:8000")
				ps = append(ps, pods.Pod{Name: name, URL: u})
				q.SetWindow(name, 64)
				scores[name] = float64(i%5) / 5
			}
			reg.Set(ps)
			q.SetAvailability(reg.Published) // as cmd/gatekeeper sets it
			q.SetScorer(scores)
			core, err := decide.New(decide.Options{Registry: reg, Admission: decide.Queue(q)})
			if err != nil {
				b.Fatal(err)
			}
			var req decide.Request
			in := decide.In{Method: "POST", Path: "/v1/chat/completions", Header: http.Header{}, Body: []byte(chatBody)}
			res := core.Decide(b.Context(), &req, in)
			if res.Admitted == nil {
				b.Fatalf("Decide = %+v, want admitted", res)
			}
			o.Core = core
			d := NewCoreDecider(o).(*coreDecider)
			primary := res.Admitted.Pod.Endpoint()
			b.ReportAllocs()
			for b.Loop() {
				d.endpoints(nil, &req, res.Admitted, primary)
			}
		})
	}
}
