package decide

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// bodyReader is a BodyReader with a fixed answer; read counts its calls.
type bodyReader struct {
	body []byte
	err  error
	read *int
}

func (b bodyReader) ReadBody(int64) ([]byte, error) {
	if b.read != nil {
		*b.read++
	}
	return b.body, b.err
}

// TestDecide runs requests from their arrival to their slot or their
// refusal, as both fronts hand them over: the route allow-list, the drain,
// the local models list, the body's limit and classification, the model's
// pods, the subset hint, the buckets, the slow breaker and the queue. An
// admitted request ends served; a refusal is the OpenAI error with its
// reason as code; nothing stays in flight. (Rows from the proxy's
// TestRefusals and the picker's TestCoreRefusals and TestCoreSubsetHint.)
func TestDecide(t *testing.T) {
	t.Parallel()
	models := func(r *rig) {
		for i := range r.pods {
			r.pods[i].Models = []string{"m"}
		}
	}
	get := func(path string) In { return In{Method: "GET", Path: path, Header: http.Header{}} }
	withRead := func(in In, b bodyReader) In { in.Body, in.Read = nil, b; return in }
	tests := []struct {
		name    string
		pol     Policy
		setup   func(*rig) // before the core is built
		after   func(*rig) // after
		in      In
		pod     string // admitted on it; "" when not admitted
		status  int
		reason  Reason
		retry   string // Retry-After; "?" any
		allow   string // a 405's Allow
		models  bool   // the local models list
		outcome Outcome
		decided string // a decision counted once ("reason enforced")
	}{
		{name: "served", in: chat(chatBody, nil), pod: "a"},
		{name: "malformed json", in: chat(`{"model":`, nil), status: 400, reason: ReasonBadRequest},
		{name: "wrong type", in: chat(`{"model":"m","messages":"hi"}`, nil), status: 400, reason: ReasonBadRequest},
		{name: "admin route", in: In{Method: "POST", Path: "/reset_prefix_cache", Header: http.Header{}, Body: []byte(`{}`)},
			status: 404, reason: ReasonNotFound},
		{name: "path trick", in: In{Method: "POST", Path: "/v1//chat/completions", Header: http.Header{}, Body: []byte(chatBody)},
			status: 404, reason: ReasonNotFound},
		{name: "encoded slash", in: In{Method: "POST", Path: "/v1%2Fchat/completions", Header: http.Header{}, Body: []byte(chatBody)},
			status: 404, reason: ReasonNotFound},
		{name: "a method the route does not allow", in: get("/v1/chat/completions"), status: 405, reason: ReasonBadRequest, allow: "POST",
			outcome: OutcomeBadRequest},
		{name: "too large", in: In{Method: "POST", Path: "/v1/chat/completions", Header: http.Header{}, Body: []byte(`{"model"`), TooLarge: true},
			status: 413, reason: ReasonBadRequest},
		{name: "too large, as read", in: withRead(chat("", nil), bodyReader{err: ErrBodyTooLarge}), status: 413, reason: ReasonBadRequest},
		{name: "compressed body", in: withRead(chat("", nil), bodyReader{err: fmt.Errorf("proxy: %w", ErrCompressed)}),
			status: 415, reason: ReasonBadRequest},
		{name: "unreadable body", in: withRead(chat("", nil), bodyReader{err: errors.New("unexpected EOF")}), status: 400, reason: ReasonBadRequest},
		{name: "the client left while its body was read", in: withRead(chat("", nil), bodyReader{err: context.Canceled}),
			outcome: OutcomeClientClosed},
		{name: "a body read is classified", in: withRead(chat("", nil), bodyReader{body: []byte(chatBody)}), pod: "a"},
		{name: "a route without a body reads none", in: withRead(In{Method: "POST", Path: "/v1/audio/transcriptions", Header: http.Header{}},
			bodyReader{err: errors.New("must not be read")}), pod: "a"},
		{name: "rate limited", setup: func(r *rig) {
			r.opts.Limiter = limiterFunc(func(string) error { return limitErr{2100 * time.Millisecond} })
		}, in: chat(chatBody, nil), status: 429, reason: ReasonRateLimited, retry: "3", decided: "rate_limited true"},
		{name: "error breaker open: Retry-After is what it still refuses", setup: func(r *rig) {
			for _, g := range r.gates {
				g.refuse, g.left = true, 6200*time.Millisecond
			}
		}, in: chat(chatBody, nil), status: 503, reason: ReasonNoUpstream, retry: "7"},
		{name: "observe mode admits", pol: Policy{Observe: true}, setup: func(r *rig) {
			r.opts.Limiter = limiterFunc(func(string) error { return limitErr{time.Second} })
		}, in: chat(chatBody, nil), pod: "a", decided: "rate_limited false"},
		{name: "drain's first step: still admitted", after: func(r *rig) { r.core.StartDrain() }, in: chat(chatBody, nil), pod: "a"},
		{name: "draining", after: func(r *rig) { r.core.Drain() }, in: chat(chatBody, nil), status: 503, reason: ReasonDraining, retry: "?"},
		{name: "draining: an unknown route is still not found", after: func(r *rig) { r.core.Drain() },
			in: In{Method: "POST", Path: "/nope", Header: http.Header{}}, status: 404, reason: ReasonNotFound},
		{name: "the models list, answered here", setup: models, in: get("/v1/models"), models: true, outcome: OutcomeServed},
		{name: "the models unknown: forwarded", in: get("/v1/models"), pod: "a"},
		{name: "a model no pod serves", setup: models, in: chat(`{"model":"x","messages":[{"role":"user","content":"hi"}]}`, nil),
			status: 404, reason: ReasonModelNotFound},
		{name: "the subset hint picks", in: In{Method: "POST", Path: "/v1/chat/completions", Header: http.Header{}, Body: []byte(chatBody),
			Subset: []string{"10.0.0.2:8000"}}, pod: "b"},
		{name: "a subset with no eligible endpoint", in: In{Method: "POST", Path: "/v1/chat/completions", Header: http.Header{},
			Body: []byte(chatBody), Subset: []string{"10.9.9.9:8000"}}, status: 503, reason: ReasonNoUpstream, retry: "?"},
		{name: "an empty subset", in: In{Method: "POST", Path: "/v1/chat/completions", Header: http.Header{},
			Body: []byte(chatBody), Subset: []string{}}, status: 503, reason: ReasonNoUpstream, retry: "?"},
		{name: "the subset's pod critical", setup: func(r *rig) { r.lv.set("b", true) }, in: In{Method: "POST", Path: "/v1/chat/completions",
			Header: http.Header{}, Body: []byte(chatBody), Subset: []string{"10.0.0.2:8000"}}, status: 503, reason: ReasonOverloaded, retry: "?",
			decided: "overloaded true"},
		{name: "every pod critical", setup: func(r *rig) { r.lv.set("a", true); r.lv.set("b", true) }, in: chat(chatBody, nil),
			status: 503, reason: ReasonOverloaded, retry: "?"},
		{name: "queue full", setup: func(r *rig) { r.adm.window = 0 }, in: chat(chatBody, nil), status: 503, reason: ReasonQueueFull, retry: "?"},
		// A request too large for every pod's free memory has its own
		// reason and outcome, not "no upstream" (issue 24).
		{name: "no memory", setup: func(r *rig) {
			r.adm.err = fmt.Errorf("%w: queue: request needs more memory than any upstream has free", errNoMemory)
		}, in: chat(chatBody, nil), status: 503, reason: ReasonNoMemory, retry: "?", outcome: OutcomeNoMemory},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, tt.pol)
			if tt.setup != nil {
				tt.setup(r)
			}
			r.build()
			if tt.after != nil {
				tt.after(r)
			}
			req, res := r.decide(t.Context(), tt.in)
			switch {
			case tt.pod != "":
				if res.Admitted == nil || res.Refusal != nil || res.Admitted.Pod.Name != tt.pod {
					t.Fatalf("Decide = %+v, want admitted on %s", res, tt.pod)
				}
				if end := r.finish(req, res.Admitted, End{Status: 200}); end.Outcome != OutcomeServed {
					t.Errorf("Finish(200) = %+v, want served", end)
				}
			case tt.models:
				var list struct{ Data []struct{ ID string } }
				if res.Admitted != nil || res.Refusal != nil || json.Unmarshal(res.Models, &list) != nil || len(list.Data) != 1 || list.Data[0].ID != "m" {
					t.Fatalf("Decide = %+v (%s), want the local models list of m", res, res.Models)
				}
			case tt.status == 0:
				if res.Admitted != nil || res.Refusal != nil || res.Models != nil || res.Status() != StatusClientClosed {
					t.Fatalf("Decide = %+v, want nothing: the client left", res)
				}
			default:
				rf := res.Refusal
				if res.Admitted != nil || rf == nil || rf.Status != tt.status || rf.Reason != tt.reason || res.Status() != tt.status {
					t.Fatalf("Decide = %+v (%+v), want %d %s", res, rf, tt.status, tt.reason)
				}
				if got := retryAfter(rf); tt.retry == "?" && got == "" || tt.retry != "?" && got != tt.retry {
					t.Errorf("Retry-After = %q, want %q", got, tt.retry)
				}
				var e struct {
					Error struct{ Message, Type, Code string }
				}
				if err := json.Unmarshal(rf.Body(), &e); err != nil || e.Error.Message == "" || e.Error.Code != string(tt.reason) {
					t.Errorf("body %s is not an OpenAI error with code %s: %v", rf.Body(), tt.reason, err)
				}
				if tt.allow != "" && res.Route.Allow() != tt.allow {
					t.Errorf("Allow = %q, want %q", res.Route.Allow(), tt.allow)
				}
			}
			want := tt.outcome
			switch {
			case want == "" && tt.pod != "":
				want = OutcomeServed
			case want == "" && tt.reason != "":
				want = tt.reason.Outcome()
			}
			if r.outcomes[want] != 1 || len(r.outcomes) != 1 {
				t.Errorf("outcomes %v, want one %s", r.outcomes, want)
			}
			if tt.decided != "" && r.rec.decisions[tt.decided] != 1 {
				t.Errorf("decisions %v, want one %q", r.rec.decisions, tt.decided)
			}
			r.settled()
		})
	}
}

// TestDecideReadsOnlyWhatItNeeds: Decide reads no body for a request it
// refuses before (the route, the drain) and reads it once otherwise.
func TestDecideReadsOnlyWhatItNeeds(t *testing.T) {
	t.Parallel()
	r := newRig(t, Policy{})
	c := r.build()
	var reads int
	in := chat("", nil)
	in.Body, in.Read = nil, bodyReader{body: []byte(chatBody), read: &reads}
	req, res := r.decide(t.Context(), in)
	if res.Admitted == nil || reads != 1 {
		t.Fatalf("Decide = %+v after %d reads, want admitted after one", res, reads)
	}
	r.finish(req, res.Admitted, End{Status: 200})
	c.Drain()
	if !c.Draining() {
		t.Fatal("Draining() = false after Drain")
	}
	if _, res := r.decide(t.Context(), in); res.Refusal == nil || res.Refusal.Reason != ReasonDraining || reads != 1 {
		t.Fatalf("Decide while draining = %+v after %d reads, want draining without a read", res, reads)
	}
	r.settled()
}

// TestDecideTraces: the Tracer hears the route, then the admission around
// Admit, with Admitting's context.
func TestDecideTraces(t *testing.T) {
	t.Parallel()
	r := newRig(t, Policy{})
	r.build()
	tr := &stepTracer{}
	in := chat(chatBody, nil)
	in.Trace = tr
	req, res := r.decide(t.Context(), in)
	r.finish(req, res.Admitted, End{Status: 200})
	if got := strings.Join(tr.steps, ","); got != "routed /v1/chat/completions true,admitting,admitted a in the admission" {
		t.Errorf("steps %s", got)
	}
	tr.steps = nil
	in.Path = "/nope"
	r.decide(t.Context(), in)
	if got := strings.Join(tr.steps, ","); got != "routed  false" {
		t.Errorf("steps of a refused route: %s", got)
	}
	r.settled()
}

type stepTracer struct{ steps []string }

type admissionKey struct{}

func (s *stepTracer) Routed(ctx context.Context, route Route, ok bool) context.Context {
	s.steps = append(s.steps, fmt.Sprintf("routed %s %v", route.Path, ok))
	return ctx
}

func (s *stepTracer) Admitting(ctx context.Context, _ *Request) context.Context {
	s.steps = append(s.steps, "admitting")
	return context.WithValue(ctx, admissionKey{}, "the admission")
}

func (s *stepTracer) Admitted(ctx context.Context, _ *Request, adm *Admitted, _ *Refusal) {
	s.steps = append(s.steps, fmt.Sprintf("admitted %s in %v", adm.Pod.Name, ctx.Value(admissionKey{})))
}

// predictedWait is what the queue returns when a request cannot start in
// time: ErrDeadline with the wait it predicted.
type predictedWait time.Duration

func (p predictedWait) Error() string             { return "queue: cannot start before its deadline" }
func (p predictedWait) RetryAfter() time.Duration { return time.Duration(p) }

// TestDeadlines: a request's deadline is its class's time-to-first-token
// deadline or the policy's, tightened by the client's header, else
// max_wait; the queue sees it, and a refusal for it is 503 deadline with the
// predicted Retry-After (capped at 60 s), counted as its own outcome.
// (From the proxy's TestDeadlines.)
func TestDeadlines(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	classes := &Classes{Header: "X-Class", Default: "chat", List: []Class{{Name: "chat"}, {Name: "docs", TTFTDeadline: 8 * time.Second}}}
	hdr := func(k, v string) http.Header { h := http.Header{}; h.Set(k, v); return h }
	for _, tc := range []struct {
		name   string
		policy Policy
		hdr    http.Header
		want   time.Duration // the deadline the queue sees, after the start
	}{
		{"none: max_wait", Policy{MaxWait: 30 * time.Second}, nil, 30 * time.Second},
		{"the policy's", Policy{MaxWait: 30 * time.Second, TTFTDeadline: 5 * time.Second}, nil, 5 * time.Second},
		{"the class's replaces it", Policy{MaxWait: 30 * time.Second, TTFTDeadline: 5 * time.Second, Classes: classes},
			hdr("X-Class", "docs"), 8 * time.Second},
		{"the client tightens it", Policy{MaxWait: 30 * time.Second, TTFTDeadline: 5 * time.Second, DeadlineHeader: "X-SLO-TTFT-Ms"},
			hdr("X-SLO-TTFT-Ms", "1500"), 1500 * time.Millisecond},
		{"but cannot loosen it", Policy{MaxWait: 30 * time.Second, TTFTDeadline: 5 * time.Second, DeadlineHeader: "X-SLO-TTFT-Ms"},
			hdr("X-SLO-TTFT-Ms", "9000"), 5 * time.Second},
		{"nor pass max_wait", Policy{MaxWait: 30 * time.Second, DeadlineHeader: "X-SLO-TTFT-Ms"},
			hdr("X-SLO-TTFT-Ms", "60000"), 30 * time.Second},
		{"and junk is ignored", Policy{MaxWait: 30 * time.Second, TTFTDeadline: 5 * time.Second, DeadlineHeader: "X-SLO-TTFT-Ms"},
			hdr("X-SLO-TTFT-Ms", "-3"), 5 * time.Second},
		{"without the header in the policy, clients cannot", Policy{MaxWait: 30 * time.Second},
			hdr("X-SLO-TTFT-Ms", "100"), 30 * time.Second},
		{"observe mode enforces no deadline", Policy{Observe: true, MaxWait: 30 * time.Second, TTFTDeadline: 5 * time.Second,
			DeadlineHeader: "X-SLO-TTFT-Ms"}, hdr("X-SLO-TTFT-Ms", "100"), 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, tc.policy)
			r.opts.Now = func() time.Time { return t0 }
			r.build()
			req, res := r.decide(t.Context(), chat(chatBody, tc.hdr))
			if res.Admitted == nil {
				t.Fatalf("Decide = %+v, want admitted", res)
			}
			r.finish(req, res.Admitted, End{Status: 200})
			if d := r.adm.needs[0].deadline.Sub(t0); d != tc.want {
				t.Errorf("the queue saw a deadline %v after the start, want %v", d, tc.want)
			}
		})
	}

	for _, tc := range []struct {
		name       string
		err        error
		hdr        http.Header
		retryAfter string
	}{
		{"predicted: Retry-After is the wait", fmt.Errorf("%w: %w", errDeadline, predictedWait(7*time.Second)), nil, "7"},
		{"a prediction past a minute is capped", fmt.Errorf("%w: %w", errDeadline, predictedWait(10*time.Minute)), nil, "60"},
		{"waited until the client's deadline", nil, hdr("X-SLO-TTFT-Ms", "30"), "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, Policy{MaxWait: 30 * time.Second, DeadlineHeader: "X-SLO-TTFT-Ms"})
				r.adm.err, r.adm.window, r.adm.block = tc.err, 0, true // the queue never grants it: the client's 30 ms pass
				r.build()
				_, res := r.decide(t.Context(), chat(chatBody, tc.hdr))
				rf := res.Refusal
				var e struct {
					Error struct{ Message, Type, Code string }
				}
				if rf == nil || rf.Status != 503 || rf.Reason != ReasonDeadline || retryAfter(rf) != tc.retryAfter ||
					json.Unmarshal(rf.Body(), &e) != nil || e.Error.Code != "deadline" {
					t.Fatalf("= %+v; want 503 deadline, Retry-After %s", rf, tc.retryAfter)
				}
				if n := r.outcomes[OutcomeDeadline]; n != 1 {
					t.Errorf("outcome deadline counted %v times, want 1", n)
				}
			})
		})
	}
}

// TestNeedCountsSequences: the window is asked for the request's
// sequences, prompts × max(n, best_of), beside its token and memory
// estimates. (From the proxy.)
func TestNeedCountsSequences(t *testing.T) {
	t.Parallel()
	r := newRig(t, Policy{})
	r.build()
	for _, body := range []string{
		`{"model":"m","prompt":["a","b"],"n":3,"max_tokens":4}`,
		`{"model":"m","prompt":"a","max_tokens":4}`,
	} {
		req, res := r.decide(t.Context(), In{Method: "POST", Path: "/v1/completions", Header: http.Header{}, Body: []byte(body)})
		if res.Admitted == nil {
			t.Fatalf("%s: %+v, want admitted", body, res)
		}
		r.finish(req, res.Admitted, End{Status: 200})
	}
	if n := r.adm.needs; len(n) != 2 || n[0].Seqs != 6 || n[1].Seqs != 1 || n[0].memory != 6*32 {
		t.Errorf("needs %+v, want 6 sequences (memory 6 × 32) then 1", n)
	}
	r.settled()
}
