package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
)

// admissionFunc is an Admission whose Acquire the test writes.
type admissionFunc func(ctx context.Context, need decide.Need) (decide.Slot, error)

func (f admissionFunc) Acquire(ctx context.Context, need decide.Need, _ int, _ []string) (decide.Slot, error) {
	return f(ctx, need)
}
func (admissionFunc) TryAcquire(decide.Need, []string) decide.Slot { return nil }
func (admissionFunc) Dispatch()                                    {}

// predictedWait is what the queue returns when a request cannot start in
// time: decide.ErrDeadline with the wait it predicted.
type predictedWait time.Duration

func (p predictedWait) Error() string             { return "queue: cannot start before its deadline" }
func (p predictedWait) RetryAfter() time.Duration { return time.Duration(p) }

// TestDeadlines: a request's deadline is its class's time-to-first-token
// deadline or the policy's, tightened by the client's header, else
// max_wait; the queue sees it, and a refusal for it is 503 deadline with the
// predicted Retry-After (capped at 60 s), counted as its own outcome.
func TestDeadlines(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	classes := &decide.Classes{Header: "X-Class", Default: "chat", List: []decide.Class{{Name: "chat"}, {Name: "docs", TTFTDeadline: 8 * time.Second}}}
	for _, tc := range []struct {
		name   string
		policy decide.Policy
		hdr    map[string]string
		want   time.Duration // the deadline the queue sees, after the start
	}{
		{"none: max_wait", decide.Policy{MaxWait: 30 * time.Second}, nil, 30 * time.Second},
		{"the policy's", decide.Policy{MaxWait: 30 * time.Second, TTFTDeadline: 5 * time.Second}, nil, 5 * time.Second},
		{"the class's replaces it", decide.Policy{MaxWait: 30 * time.Second, TTFTDeadline: 5 * time.Second, Classes: classes},
			map[string]string{"X-Class": "docs"}, 8 * time.Second},
		{"the client tightens it", decide.Policy{MaxWait: 30 * time.Second, TTFTDeadline: 5 * time.Second, DeadlineHeader: "X-SLO-TTFT-Ms"},
			map[string]string{"X-SLO-TTFT-Ms": "1500"}, 1500 * time.Millisecond},
		{"but cannot loosen it", decide.Policy{MaxWait: 30 * time.Second, TTFTDeadline: 5 * time.Second, DeadlineHeader: "X-SLO-TTFT-Ms"},
			map[string]string{"X-SLO-TTFT-Ms": "9000"}, 5 * time.Second},
		{"nor pass max_wait", decide.Policy{MaxWait: 30 * time.Second, DeadlineHeader: "X-SLO-TTFT-Ms"},
			map[string]string{"X-SLO-TTFT-Ms": "60000"}, 30 * time.Second},
		{"and junk is ignored", decide.Policy{MaxWait: 30 * time.Second, TTFTDeadline: 5 * time.Second, DeadlineHeader: "X-SLO-TTFT-Ms"},
			map[string]string{"X-SLO-TTFT-Ms": "-3"}, 5 * time.Second},
		{"without the header in the policy, clients cannot", decide.Policy{MaxWait: 30 * time.Second},
			map[string]string{"X-SLO-TTFT-Ms": "100"}, 30 * time.Second},
		{"observe mode enforces no deadline", decide.Policy{Observe: true, MaxWait: 30 * time.Second, TTFTDeadline: 5 * time.Second,
			DeadlineHeader: "X-SLO-TTFT-Ms"}, map[string]string{"X-SLO-TTFT-Ms": "100"}, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got time.Time
			tp := newTestProxy(t, okPod(), func(o *testOptions) {
				o.Policy, o.Now = tc.policy, func() time.Time { return t0 }
				o.Admission = admissionFunc(func(_ context.Context, n decide.Need) (decide.Slot, error) {
					got = n.Deadline
					sem := make(chan struct{}, 1)
					sem <- struct{}{} // the slot it holds, given back by Release
					return &fakeSlot{name: "pod-0", sem: sem}, nil
				})
			})
			res := post(t, tp.srv.URL, "/v1/chat/completions", chatBody, tc.hdr)
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if d := got.Sub(t0); d != tc.want {
				t.Errorf("the queue saw a deadline %v after the start, want %v", d, tc.want)
			}
		})
	}

	for _, tc := range []struct {
		name       string
		err        error
		hdr        map[string]string
		retryAfter string
	}{
		{"predicted: Retry-After is the wait", fmt.Errorf("%w: %w", decide.ErrDeadline, predictedWait(7*time.Second)), nil, "7"},
		{"a prediction past a minute is capped", fmt.Errorf("%w: %w", decide.ErrDeadline, predictedWait(10*time.Minute)), nil, "60"},
		{"waited until the client's deadline", nil, map[string]string{"X-SLO-TTFT-Ms": "30"}, "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTestProxy(t, okPod(), func(o *testOptions) {
				o.Policy = decide.Policy{MaxWait: 30 * time.Second, DeadlineHeader: "X-SLO-TTFT-Ms"}
				o.Admission = admissionFunc(func(ctx context.Context, _ decide.Need) (decide.Slot, error) {
					if tc.err != nil {
						return nil, tc.err
					}
					<-ctx.Done() // the queue never grants it: the client's 30 ms pass
					return nil, ctx.Err()
				})
			})
			res := post(t, tp.srv.URL, "/v1/chat/completions", chatBody, tc.hdr)
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			var e struct {
				Error struct{ Message, Type, Code string }
			}
			if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("X-Gatekeeper-Reason") != "deadline" ||
				res.Header.Get("Retry-After") != tc.retryAfter || json.Unmarshal(body, &e) != nil || e.Error.Code != "deadline" {
				t.Errorf("= %d, reason %q, Retry-After %q, body %s; want 503 deadline, Retry-After %s",
					res.StatusCode, res.Header.Get("X-Gatekeeper-Reason"), res.Header.Get("Retry-After"), body, tc.retryAfter)
			}
			if n := tp.outcomes(t)[decide.OutcomeDeadline]; n != 1 {
				t.Errorf("outcome deadline counted %v times, want 1", n)
			}
		})
	}
}

// A request too large for every pod's free memory has its own reason and
// outcome, not "no upstream" (issue 24).
func TestNoMemoryRefusal(t *testing.T) {
	tp := newTestProxy(t, okPod(), func(o *testOptions) {
		o.Admission = admissionFunc(func(context.Context, decide.Need) (decide.Slot, error) {
			return nil, fmt.Errorf("%w: queue: request needs more memory than any upstream has free", decide.ErrNoMemory)
		})
	})
	res := post(t, tp.srv.URL, "/v1/chat/completions", chatBody, nil)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("X-Gatekeeper-Reason") != "no_memory" || res.Header.Get("Retry-After") == "" {
		t.Errorf("= %d, reason %q, Retry-After %q, body %s; want 503 no_memory with Retry-After",
			res.StatusCode, res.Header.Get("X-Gatekeeper-Reason"), res.Header.Get("Retry-After"), body)
	}
	if n := tp.outcomes(t)[decide.OutcomeNoMemory]; n != 1 {
		t.Errorf("outcome no_memory counted %v times, want 1", n)
	}
}
