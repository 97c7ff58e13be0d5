package epp

import (
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/telemetry/coretrace"
	"github.com/gatekeeper-dev/gatekeeper/internal/usage"
)

// The picker over the real decision core: the same queue, registry,
// buckets and refusals the proxy uses, with Envoy's part played message by
// message. The queue's own in-flight count is the truth the tests read.

type levels struct {
	mu       sync.Mutex
	critical map[string]bool
}

func (l *levels) Critical(p string) bool { l.mu.Lock(); defer l.mu.Unlock(); return l.critical[p] }
func (l *levels) Degraded(p string) bool { return l.Critical(p) }

// outcomes counts what the picker records, as the request metrics would.
type outcomes struct {
	mu   sync.Mutex
	byO  map[decide.Outcome]int
	used int64 // completion tokens
}

func (o *outcomes) Outcome(out decide.Outcome, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.byO[out]++
}
func (o *outcomes) ClassOutcome(string, decide.Outcome) {}
func (o *outcomes) Rejected(decide.Reason)              {}
func (o *outcomes) Sent(string, int64)                  {}
func (o *outcomes) Response(string, int)                {}
func (o *outcomes) Usage(_ string, u usage.Tokens) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.used += u.Completion
}

func (o *outcomes) get(out decide.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.byO[out]
}

type corePicker struct {
	*harness
	rec     *outcomes
	q       *queue.Queue
	reg     *pods.Registry
	lv      *levels
	core    *decide.Core
	dec     Decider
	refused atomic.Int32 // OnPodRefused calls
}

// newCorePicker serves pods "a" (10.0.0.1:8000) and "b" (10.0.0.2:8000),
// each with a window of window, behind a limiter of limiter.
func newCorePicker(t *testing.T, window int, limiter breaker.LimiterSettings, pol decide.Policy) *corePicker {
	t.Helper()
	return newCorePickerExtra(t, window, limiter, pol, coreExtra{})
}

// coreExtra is what a test picker may have beyond its window, limiter and
// policy.
type coreExtra struct {
	models   []string           // what each pod serves; nil: every model, unknown
	server   Options            // the Server's options but its Decider
	podState coretrace.PodState // for the admission span
	pods     []string           // the pods' names, the i-th at 10.0.0.<i+1>:8000; nil: a and b
	decider  CoreOptions        // Fallbacks and Scores
}

// newCorePickerExtra is newCorePicker with extra.
func newCorePickerExtra(t *testing.T, window int, limiter breaker.LimiterSettings, pol decide.Policy, extra coreExtra) *corePicker {
	t.Helper()
	q, err := queue.New(queue.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	cp := &corePicker{q: q, lv: &levels{critical: map[string]bool{}}, rec: &outcomes{byO: map[decide.Outcome]int{}}}
	cp.reg = pods.New(cp.lv)
	var ps []pods.Pod
	if extra.pods == nil {
		extra.pods = []string{"a", "b"}
	}
	for i, name := range extra.pods {
		u, _ := url.Parse("http://10.0.0." + strconv.Itoa(i+1) + ":8000")
		ps = append(ps, pods.Pod{Name: name, URL: u, Models: extra.models})
		q.SetWindow(name, window)
	}
	cp.reg.Set(ps)
	q.SetAvailability(cp.reg.Availability)
	lim, err := breaker.NewLimiter(limiter)
	if err != nil {
		t.Fatal(err)
	}
	core, err := decide.New(decide.Options{Registry: cp.reg, Admission: decide.Queue(q), Limiter: lim, Policy: pol,
		OnPodRefused: func(string) { cp.refused.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	cp.core = core
	cp.dec = NewCoreDecider(CoreOptions{Core: core, Recorder: cp.rec, PodState: extra.podState,
		Fallbacks: extra.decider.Fallbacks, Scores: extra.decider.Scores})
	cp.harness = serveDecider(t, cp.dec, extra.server)
	return cp
}

func (cp *corePicker) inflight() int { return cp.q.InFlight("a") + cp.q.InFlight("b") }

// settled checks, once every goroutine of the bubble is idle (the release
// runs on the stream's goroutine after its last answer), that every slot
// is back and nobody waits.
func (cp *corePicker) settled(t *testing.T) {
	t.Helper()
	synctest.Wait()
	if cp.inflight() != 0 || cp.q.Stats().Length != 0 {
		t.Fatalf("%d slots held, %d waiting after every stream ended", cp.inflight(), cp.q.Stats().Length)
	}
}

// waiting checks, once the bubble is idle, how many wait in the queue.
func (cp *corePicker) waiting(t *testing.T, want int) {
	t.Helper()
	synctest.Wait()
	if n := cp.q.Stats().Length; n != want {
		t.Fatalf("%d waiting in the queue, want %d", n, want)
	}
}

func chat(e *envoy, extra ...*extprocv3.ProcessingRequest) {
	e.send(reqHeaders(false, "content-type", "application/json"))
	for _, m := range extra {
		e.send(m)
	}
	e.send(reqBody(chatBody, true))
}

func TestCoreHoldsTheSlotUntilTheResponseEnds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cp := newCorePicker(t, 1, breaker.LimiterSettings{}, decide.Policy{})
		e := cp.open()
		chat(e)
		got := e.pick(strconv.Itoa(len(chatBody)))
		if got != "10.0.0.1:8000" && got != "10.0.0.2:8000" {
			t.Fatalf("pick = %q, want one pod's ip:port", got)
		}
		e.body(requestSide, len(chatBody), true)
		if n := cp.inflight(); n != 1 {
			t.Fatalf("in flight while the response runs = %d, want 1", n)
		}
		e.send(respHeaders(false, ":status", "200", "content-type", "text/event-stream"))
		e.recv()
		e.send(respBody(sseUsage, false))
		e.body(responseSide, len(sseUsage), false)
		if n := cp.inflight(); n != 1 {
			t.Fatalf("in flight mid-stream = %d, want 1", n)
		}
		e.send(respBody(sseDone, true))
		e.body(responseSide, len(sseDone), true)
		e.closed()
		cp.settled(t)
		if cp.rec.get(decide.OutcomeServed) != 1 || cp.rec.used != 10 {
			t.Fatalf("served %d, completion tokens %d; want one served with the usage's 10", cp.rec.get(decide.OutcomeServed), cp.rec.used)
		}
	})
}

// A full window queues the next request in the core's queue; the first
// one's end dispatches it.
func TestCoreQueuesBehindAFullWindow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cp := newCorePicker(t, 1, breaker.LimiterSettings{}, decide.Policy{})
		var es []*envoy
		for range 2 {
			e := cp.open()
			chat(e)
			es = append(es, e)
			e.pick(strconv.Itoa(len(chatBody)))
			e.body(requestSide, len(chatBody), true)
		}
		third := cp.open()
		chat(third)
		cp.waiting(t, 1)
		if n := cp.inflight(); n != 2 {
			t.Fatalf("in flight = %d, want both windows full", n)
		}
		es[0].send(respHeaders(true, ":status", "200"))
		es[0].recv()
		es[0].closed()
		third.pick(strconv.Itoa(len(chatBody))) // dispatched by the release
		third.body(requestSide, len(chatBody), true)
		for _, e := range []*envoy{es[1], third} {
			e.send(respHeaders(true, ":status", "200"))
			e.recv()
			e.closed()
		}
		cp.settled(t)
	})
}

func TestCoreSubsetHint(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cp := newCorePicker(t, 4, breaker.LimiterSettings{}, decide.Policy{})
		for range 3 {
			e := cp.open()
			chat(e, subset(reqBody("", false), "10.0.0.2:8000"))
			if got := e.pick(strconv.Itoa(len(chatBody))); got != "10.0.0.2:8000" {
				t.Fatalf("pick = %q, want the subset's only endpoint", got)
			}
			e.body(requestSide, len(chatBody), true)
			e.send(respHeaders(true, ":status", "200"))
			e.recv()
			e.closed()
		}
		e := cp.open()
		chat(e, subset(reqBody("", false), "10.9.9.9:8000"))
		ir := e.refused()
		if ir.GetStatus().GetCode() != 503 || header(ir, "x-gatekeeper-reason") != "no_upstream" || header(ir, "retry-after") == "" {
			t.Fatalf("subset with no eligible endpoint: %v %q, want 503 no_upstream with Retry-After", ir.GetStatus().GetCode(), header(ir, "x-gatekeeper-reason"))
		}
		cp.lv.mu.Lock()
		cp.lv.critical["b"] = true
		cp.lv.mu.Unlock()
		e = cp.open()
		chat(e, subset(reqBody("", false), "10.0.0.2:8000"))
		if ir := e.refused(); ir.GetStatus().GetCode() != 503 || header(ir, "x-gatekeeper-reason") != "overloaded" {
			t.Fatalf("the subset's pod critical: %v %q, want 503 overloaded", ir.GetStatus().GetCode(), header(ir, "x-gatekeeper-reason"))
		}
		cp.settled(t)
	})
}

func TestCoreRefusals(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cp := newCorePicker(t, 4, breaker.LimiterSettings{QPS: 0.001, Burst: 1}, decide.Policy{MaxBodyBytes: 200})
		e := cp.open()
		chat(e)
		e.pick(strconv.Itoa(len(chatBody)))
		e.body(requestSide, len(chatBody), true)
		e.send(respHeaders(true, ":status", "200"))
		e.recv()
		e.closed()
		tests := []struct {
			name   string
			send   []*extprocv3.ProcessingRequest
			status int
			reason string
		}{
			{"shed by the bucket", []*extprocv3.ProcessingRequest{reqHeaders(false), reqBody(chatBody, true)}, 429, "rate_limited"},
			{"not an inference route", []*extprocv3.ProcessingRequest{reqHeaders(true, ":path=v", "/v1/load_lora_adapter")}, 404, "not_found"},
			{"malformed body", []*extprocv3.ProcessingRequest{reqHeaders(false), reqBody(`{"model":`, true)}, 400, "bad_request"},
			{"too large", []*extprocv3.ProcessingRequest{reqHeaders(false), reqBody(`{"model":"m","prompt":"`+string(make([]byte, 300))+`"}`, true)}, 413, "bad_request"},
		}
		for _, tt := range tests {
			e := cp.open()
			e.send(tt.send...)
			ir := e.refused()
			if int(ir.GetStatus().GetCode()) != tt.status || header(ir, "x-gatekeeper-reason") != tt.reason {
				t.Errorf("%s: %v %q, want %d %s", tt.name, ir.GetStatus().GetCode(), header(ir, "x-gatekeeper-reason"), tt.status, tt.reason)
			}
			if tt.status == 429 && header(ir, "retry-after") == "" {
				t.Errorf("%s: no Retry-After", tt.name)
			}
			if len(ir.GetBody()) == 0 || ir.GetBody()[0] != '{' {
				t.Errorf("%s: body %q, want the OpenAI error JSON", tt.name, ir.GetBody())
			}
		}
		cp.settled(t)
	})
}

// A pod's own 503 is overload: the slot comes back, the pod is not blamed,
// and its window is cut as the proxy's would be.
func TestCorePodRefusal(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cp := newCorePicker(t, 4, breaker.LimiterSettings{}, decide.Policy{})
		e := cp.open()
		chat(e)
		e.pick(strconv.Itoa(len(chatBody)))
		e.body(requestSide, len(chatBody), true)
		e.send(respHeaders(false, ":status", "503"))
		e.recv()
		e.send(respBody(`{"error":"queue full"}`, true))
		e.body(responseSide, len(`{"error":"queue full"}`), true)
		e.closed()
		cp.settled(t)
		if cp.rec.get(decide.OutcomeUpstreamOverloaded) != 1 {
			t.Errorf("outcome upstream_overloaded = %d, want 1", cp.rec.get(decide.OutcomeUpstreamOverloaded))
		}
		if cp.refused.Load() != 1 {
			t.Fatalf("OnPodRefused calls = %d, want 1", cp.refused.Load())
		}
	})
}

// A client gone while queued leaves nothing behind: no waiter, no slot.
func TestCoreClientGoneWhileQueued(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cp := newCorePicker(t, 1, breaker.LimiterSettings{}, decide.Policy{})
		var held []*envoy
		for range 2 {
			e := cp.open()
			chat(e)
			e.pick(strconv.Itoa(len(chatBody)))
			held = append(held, e)
		}
		gone := cp.open()
		chat(gone)
		cp.waiting(t, 1)
		gone.cancel() // Envoy resets the stream: the client left
		cp.waiting(t, 0)
		for _, e := range held {
			e.cancel() // reset mid-exchange: released as incomplete
		}
		cp.settled(t)
		if n := cp.rec.get(decide.OutcomeClientClosed); n != 3 {
			t.Errorf("client_closed = %d, want the one gone while queued and the two reset", n)
		}
	})
}

// TestCoreTranslation: what the core decides reaches Envoy as the proxy's
// answers reach a client: the local models list as an ImmediateResponse
// 200 of JSON, counted served; the drain's refusal with its reason and
// Retry-After, counted draining, with readiness off. The core's decisions
// themselves are tested in package decide.
func TestCoreTranslation(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cp := newCorePickerExtra(t, 4, breaker.LimiterSettings{}, decide.Policy{}, coreExtra{models: []string{"m"}})
		e := cp.open()
		e.send(reqHeaders(true, ":method", "GET", ":path", "/v1/models"))
		ir := e.refused()
		if ir.GetStatus().GetCode() != 200 || header(ir, "content-type") != "application/json" || !strings.Contains(string(ir.GetBody()), `"id":"m"`) {
			t.Fatalf("GET /v1/models: %v %q %s, want 200 with the models list", ir.GetStatus().GetCode(), header(ir, "content-type"), ir.GetBody())
		}
		if n := cp.rec.get(decide.OutcomeServed); n != 1 {
			t.Errorf("served = %d, want the models list", n)
		}
		if !cp.dec.Ready() {
			t.Fatal("not ready before the drain")
		}
		cp.core.StartDrain() // the shutdown's first step, in the core
		if cp.dec.Ready() {
			t.Error("ready once the core's drain has started")
		}
		cp.core.Drain()
		if cp.dec.Ready() {
			t.Error("ready while the core drains")
		}
		e = cp.open()
		chat(e)
		ir = e.refused()
		if ir.GetStatus().GetCode() != 503 || header(ir, "x-gatekeeper-reason") != "draining" || header(ir, "retry-after") == "" {
			t.Fatalf("while draining: %v %q, want 503 draining with Retry-After", ir.GetStatus().GetCode(), header(ir, "x-gatekeeper-reason"))
		}
		if n := cp.rec.get(decide.OutcomeDraining); n != 1 {
			t.Errorf("draining = %d, want 1", n)
		}
		cp.settled(t)
	})
}
