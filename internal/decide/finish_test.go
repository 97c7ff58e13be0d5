package decide

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/quota"
)

// TestFinish is the one table both fronts end a request by: each row is an
// exchange's end as a front saw it, and what the core made of it: the
// outcome, the pod's error-breaker result, the pod's own refusal told to
// OnPodRefused, what the request's quota charge became (given back, trued up
// to the usage, or the estimate standing) and the slot back.
func TestFinish(t *testing.T) {
	t.Parallel()
	used := Usage{Prompt: 7, Completion: 10, Known: true}
	const estimate = -1 // the estimate stands
	tests := []struct {
		name     string
		end      End
		outcome  Outcome
		result   pods.Result
		status   int
		refused  bool  // told to OnPodRefused
		charged  int64 // the quota's use after; estimate: unchanged
		fairness int64 // the slot settled to (7 + 2 × 10 for the usage); -1: not settled (estimate)
	}{
		{"served, usage known", End{Status: 200, Usage: used}, OutcomeServed, pods.Success, 200, false, 17, 27},
		{"served, no usage", End{Status: 200}, OutcomeServed, pods.Success, 200, false, estimate, -1},
		{"a 4xx is the pod's answer", End{Status: 400, Usage: used}, OutcomeServed, pods.Success, 400, false, 17, 27},
		{"the pod's own 503", End{Status: 503}, OutcomeUpstreamOverloaded, pods.Excluded, 503, true, 0, 0},
		{"the pod's own 429", End{Status: 429}, OutcomeUpstreamOverloaded, pods.Excluded, 429, true, 0, 0},
		{"a 5xx", End{Status: 500}, OutcomeUpstreamError, pods.Failure, 500, false, 0, 0},
		{"a 200 stream with an error event", End{Status: 200, StreamError: true, Usage: used}, OutcomeStreamError, pods.Failure, 200, false, 17, 27},
		{"the client took nothing in time", End{Status: 200, Cut: CutTimeout}, OutcomeClientTimeout, pods.Excluded, 200, false, estimate, -1},
		{"the client left", End{Status: 200, Cut: CutClient}, OutcomeClientClosed, pods.Excluded, StatusClientClosed, false, estimate, -1},
		{"the client left during a 503's body", End{Status: 503, Cut: CutClient}, OutcomeClientClosed, pods.Excluded, StatusClientClosed, true, estimate, -1},
		{"no answer: the pod failed", End{Cut: CutUpstream}, OutcomeUpstreamError, pods.Failure, statusBadGateway, false, estimate, -1},
		{"a stream cut by the pod", End{Status: 200, Cut: CutUpstream}, OutcomeUpstreamError, pods.Failure, statusBadGateway, false, estimate, -1},
		// The picker cannot tell why an exchange ended early: a failing
		// status stands as the pod's answer, anything else is not blamed.
		{"unknown end, no headers", End{Cut: CutUnknown}, OutcomeClientClosed, pods.Excluded, StatusClientClosed, false, estimate, -1},
		{"unknown end of a 200", End{Status: 200, Cut: CutUnknown}, OutcomeClientClosed, pods.Excluded, StatusClientClosed, false, estimate, -1},
		{"unknown end of a 503", End{Status: 503, Cut: CutUnknown}, OutcomeUpstreamOverloaded, pods.Excluded, 503, true, 0, 0},
		{"unknown end of a 502", End{Status: 502, Cut: CutUnknown}, OutcomeUpstreamError, pods.Failure, 502, false, 0, 0},
		{"unknown end of a stream with an error event", End{Status: 200, StreamError: true, Cut: CutUnknown}, OutcomeStreamError, pods.Failure, 200, false, estimate, -1},
		// The proxy's one retry: no outcome here, the charge goes on.
		{"retried after the pod's own refusal", End{Status: 503, Retry: true}, "", pods.Excluded, 503, true, estimate, 0},
		{"retried after a dial error", End{Retry: true, Cut: CutUpstream}, "", pods.Failure, 0, false, estimate, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q, err := quota.New(quota.Settings{})
			if err != nil {
				t.Fatal(err)
			}
			if err := q.SetLimits(quota.Limits{Models: map[string]quota.Limit{"m": {PerMinute: 100000}}}); err != nil {
				t.Fatal(err)
			}
			r := newRig(t, Policy{Quotas: true, Fair: &Fairness{TenantHeader: "X-Tenant"}})
			r.opts.Quotas = q
			r.build()
			req, res := r.decide(t.Context(), chat(chatBody, nil))
			if res.Admitted == nil {
				t.Fatalf("Decide = %+v, want admitted", res)
			}
			charged := q.Snapshot().Models["m"].Minute.Used
			end := r.finish(req, res.Admitted, tt.end)
			if end.Outcome != tt.outcome || end.result != tt.result || end.Status != tt.status || end.PodRefused != (tt.refused && tt.outcome != OutcomeClientClosed) {
				t.Errorf("Finish = %+v, want %s, result %v, status %d", end, tt.outcome, tt.result, tt.status)
			}
			if got := r.gates["a"].got(); len(got) != 1 || got[0] != tt.result {
				t.Errorf("the pod's breaker heard %v, want [%v]", got, tt.result)
			}
			if (len(r.refused) == 1) != tt.refused {
				t.Errorf("OnPodRefused calls %v, want refused %v", r.refused, tt.refused)
			}
			want := tt.charged
			if want == estimate {
				want = charged
			}
			if got := q.Snapshot().Models["m"].Minute.Used; got != want {
				t.Errorf("quota used %d after Finish (%d at admission), want %d", got, charged, want)
			}
			if s := r.adm.settled; tt.fairness < 0 && len(s) != 0 || tt.fairness >= 0 && (len(s) != 1 || s[0] != tt.fairness) {
				t.Errorf("the slot settled %v, want %d", s, tt.fairness)
			}
			r.settled()
		})
	}
}

// TestRetryKeepsTheCharge: a request a pod refused goes on to another pod
// with room (Retry) holding its quota charge; its second end settles it.
func TestRetryKeepsTheCharge(t *testing.T) {
	t.Parallel()
	q, err := quota.New(quota.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SetLimits(quota.Limits{Models: map[string]quota.Limit{"m": {PerMinute: 100000}}}); err != nil {
		t.Fatal(err)
	}
	r := newRig(t, Policy{Quotas: true})
	r.opts.Quotas = q
	c := r.build()
	req, res := r.decide(t.Context(), chat(chatBody, nil))
	first := res.Admitted
	next, ok := c.Retry(req, []string{first.Pod.Name})
	if !ok || next.Pod.Name != "b" {
		t.Fatalf("Retry = %+v %v, want a slot on b", next, ok)
	}
	if end := r.finish(req, first, End{Status: 503, Retry: true}); end.Outcome != "" || r.adm.inFlight() != 1 {
		t.Fatalf("the first end = %+v with %d in flight, want no outcome and the retry's slot held", end, r.adm.inFlight())
	}
	if q.Snapshot().Models["m"].Minute.Used == 0 {
		t.Fatal("the charge was given back on the retry")
	}
	if end := r.finish(req, next, End{Status: 200, Usage: Usage{Prompt: 7, Completion: 10, Known: true}}); end.Outcome != OutcomeServed {
		t.Fatalf("the second end = %+v, want served", end)
	}
	if got := q.Snapshot().Models["m"].Minute.Used; got != 17 {
		t.Errorf("quota used %d, want the usage's 17", got)
	}
	if r.outcomes[OutcomeServed] != 1 || len(r.outcomes) != 1 || len(r.refused) != 1 {
		t.Errorf("outcomes %v, refusals told %v; want one served, one refusal", r.outcomes, r.refused)
	}
	r.settled()
}

// TestQuotaChargeAndTrueUp: a client's quota is charged each request's
// estimate at admission and trued up to the pod's usage when the response
// ends, JSON or stream, so requests the estimates alone would refuse still
// pass; once the usage fills the minute, the next request gets 429
// quota_exceeded with the Retry-After of the window, other clients are
// untouched, and a minute later it passes again. A request the pod refuses
// is given back. (From the proxy's TestQuotaChargeAndTrueUp.)
func TestQuotaChargeAndTrueUp(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	var clock sync.Mutex
	tick := func(d time.Duration) { clock.Lock(); now = now.Add(d); clock.Unlock() }
	q, err := quota.New(quota.Settings{Now: func() time.Time { clock.Lock(); defer clock.Unlock(); return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SetLimits(quota.Limits{PerClient: quota.Limit{PerMinute: 1000}}); err != nil {
		t.Fatal(err)
	}
	r := newRig(t, Policy{Quotas: true, ClientKeyHeader: "Authorization"})
	r.opts.Quotas = q
	r.build()
	// An estimate of about 400 tokens: three of them would not fit 1000.
	body := `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":400}`
	stream := `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":400,"stream":true,"stream_options":{"include_usage":true}}`
	a := http.Header{"Authorization": {"Bearer a"}}
	b := http.Header{"Authorization": {"Bearer b"}}
	steps := []struct {
		name               string
		status             int
		prompt, completion int64
		body               string
		hdr                http.Header
		advance            time.Duration
		want               int
	}{
		{name: "first, 30 used", status: 200, prompt: 10, completion: 20, body: body, hdr: a, want: 200},
		{name: "second, 60 used", status: 200, prompt: 10, completion: 20, body: body, hdr: a, want: 200},
		{name: "third fits after the true-ups", status: 200, prompt: 10, completion: 20, body: body, hdr: a, want: 200},
		{name: "a stream, trued up from its last chunk", status: 200, prompt: 10, completion: 20, body: stream, hdr: a, want: 200},
		{name: "the pod refuses: given back", status: 503, body: body, hdr: a, want: 503},
		{name: "the pod refuses again: given back", status: 503, body: body, hdr: a, want: 503},
		{name: "a heavy answer fills the minute", status: 200, prompt: 100, completion: 700, body: body, hdr: a, want: 200},
		{name: "over quota", status: 200, prompt: 10, completion: 20, body: body, hdr: a, want: 429},
		{name: "another client is untouched", status: 200, prompt: 10, completion: 20, body: body, hdr: b, want: 200},
		{name: "a minute later", status: 200, prompt: 10, completion: 20, body: body, hdr: a, advance: 61 * time.Second, want: 200},
	}
	for _, st := range steps {
		tick(st.advance)
		req, res := r.decide(t.Context(), chat(st.body, st.hdr))
		if res.Admitted != nil {
			u := Usage{Prompt: st.prompt, Completion: st.completion, Known: st.status == 200}
			r.finish(req, res.Admitted, End{Status: st.status, Usage: u})
			if st.status != st.want {
				t.Fatalf("%s: admitted, want %d", st.name, st.want)
			}
			continue
		}
		rf := res.Refusal
		if rf == nil || rf.Status != st.want {
			t.Fatalf("%s: %+v, want %d", st.name, res, st.want)
		}
		ra, _ := strconv.Atoi(retryAfter(rf))
		if rf.Reason != ReasonQuotaExceeded || ra < 1 || ra > 61 ||
			!strings.Contains(string(rf.Body()), `"code":"quota_exceeded"`) || !strings.Contains(string(rf.Body()), "1000 tokens per minute") {
			t.Fatalf("%s: reason %q, Retry-After %d, body %s; want quota_exceeded, 1..61 s (a charge expires at the end of its second), the quota named",
				st.name, rf.Reason, ra, rf.Body())
		}
	}
	if n := r.outcomes[OutcomeQuotaExceeded]; n != 1 {
		t.Errorf("quota_exceeded outcomes = %v, want 1", n)
	}
	if n := r.rec.decided("quota_exceeded", true); n != 1 {
		t.Errorf("enforced quota decisions = %v, want 1", n)
	}
	r.settled()
}

// TestQuotaShadow: in shadow mode a request over quota is charged and
// counted as a decision not enforced, and served. (From the proxy.)
func TestQuotaShadow(t *testing.T) {
	t.Parallel()
	q, err := quota.New(quota.Settings{Now: func() time.Time { return time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SetLimits(quota.Limits{Models: map[string]quota.Limit{"m": {PerDay: 500}}}); err != nil {
		t.Fatal(err)
	}
	r := newRig(t, Policy{Quotas: true, QuotaShadow: true})
	r.opts.Quotas = q
	r.build()
	for i := range 3 { // 400 used, then 800: the third would be refused
		req, res := r.decide(t.Context(), chat(chatBody, nil))
		if res.Admitted == nil {
			t.Fatalf("request %d: %+v, want admitted in shadow mode", i, res)
		}
		if end := r.finish(req, res.Admitted, End{Status: 200, Usage: Usage{Prompt: 100, Completion: 300, Known: true}}); end.Outcome != OutcomeServed {
			t.Fatalf("request %d: %+v, want served", i, end)
		}
	}
	if n := r.rec.decided("quota_exceeded", false); n != 1 {
		t.Errorf("shadow quota decisions = %v, want 1 (%+v)", n, q.Snapshot())
	}
	if used := q.Snapshot(); fmt.Sprint(used) == "" {
		t.Fatal("no snapshot")
	}
	r.settled()
}

// TestCoreQuota: the estimate is charged at the pick, trued up from the
// usage at the end, and a request with no room is refused 429
// quota_exceeded with Retry-After; a minute later it passes. (From the
// picker's TestCoreQuota.)
func TestCoreQuota(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q, err := quota.New(quota.Settings{})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.SetLimits(quota.Limits{Models: map[string]quota.Limit{"m": {PerMinute: 1000}}}); err != nil {
			t.Fatal(err)
		}
		used := func() int64 { return q.Snapshot().Models["m"].Minute.Used }
		r := newRig(t, Policy{Quotas: true})
		r.opts.Quotas = q
		r.build()
		req, res := r.decide(t.Context(), chat(chatBody, nil))
		estimate := used()
		if res.Admitted == nil || estimate <= 17 {
			t.Fatalf("charged %d at the pick (%+v), want the estimate (above the usage's 17)", estimate, res)
		}
		r.finish(req, res.Admitted, End{Status: 200, Usage: Usage{Prompt: 7, Completion: 10, Known: true}})
		if got := used(); got != 17 {
			t.Fatalf("used after the exchange = %d, want the usage's 7 + 10", got)
		}
		// One token short of room for a second estimate.
		if err := q.SetLimits(quota.Limits{Models: map[string]quota.Limit{"m": {PerMinute: 17 + estimate - 1}}}); err != nil {
			t.Fatal(err)
		}
		_, res = r.decide(t.Context(), chat(chatBody, nil))
		ra, _ := strconv.Atoi(retryAfter(res.Refusal))
		if res.Refusal == nil || res.Refusal.Status != 429 || res.Refusal.Reason != ReasonQuotaExceeded || ra < 1 || ra > 61 {
			t.Fatalf("over quota: %+v, want 429 quota_exceeded within a minute", res.Refusal)
		}
		if r.outcomes[OutcomeQuotaExceeded] != 1 {
			t.Errorf("quota_exceeded outcomes = %d, want 1", r.outcomes[OutcomeQuotaExceeded])
		}
		time.Sleep(61 * time.Second) // the bubble's clock: the first charge leaves the window
		req, res = r.decide(t.Context(), chat(chatBody, nil))
		if res.Admitted == nil {
			t.Fatalf("a minute later: %+v, want admitted", res)
		}
		r.finish(req, res.Admitted, End{Status: 200})
		r.settled()
	})
}

// TestOnlyOneSlotPerRequest hammers the core from many goroutines: every
// admitted request holds one slot until its Finish, and the fake queue's
// count comes back to zero.
func TestOnlyOneSlotPerRequest(t *testing.T) {
	t.Parallel()
	r := newRig(t, Policy{})
	r.opts.OnPodRefused = nil
	c := r.build()
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			req := new(Request)
			res := c.Decide(t.Context(), req, chat(chatBody, nil))
			if res.Admitted == nil {
				return // the windows are full: queue_full
			}
			status := []int{200, 503, 500}[i%3]
			c.Finish(req, res.Admitted, End{Status: status})
			res.Admitted.Slot.Release()
		})
	}
	wg.Wait()
	r.settled()
	if got := slices.Concat(r.gates["a"].got(), r.gates["b"].got()); len(got) != r.adm.released {
		t.Errorf("%d results for %d slots released", len(got), r.adm.released)
	}
}
