package decide

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"

	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// The fakes the core's behaviour tests run on: pod levels, error breakers
// that record what they hear, an admission queue that counts what is in
// flight (and what it was asked), a limiter and a recorder.

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":16}`

// levels are the pods' pressure levels.
type levels struct {
	mu       sync.Mutex
	critical map[string]bool
}

func (l *levels) Critical(p string) bool { l.mu.Lock(); defer l.mu.Unlock(); return l.critical[p] }
func (l *levels) Degraded(p string) bool { return l.Critical(p) }

func (l *levels) set(p string, critical bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.critical[p] = critical
}

// gate is an error breaker that records the results it hears; refuse
// opens it, with left as its OpenRemaining.
type gate struct {
	mu      sync.Mutex
	results []pods.Result
	refuse  bool
	left    time.Duration
}

func (g *gate) Allow() (func(pods.Result), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refuse {
		return nil, errors.New("open")
	}
	return func(r pods.Result) { g.mu.Lock(); g.results = append(g.results, r); g.mu.Unlock() }, nil
}

func (g *gate) Admits() (breaker.State, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refuse {
		return breaker.Open, false
	}
	return breaker.Closed, true
}

func (g *gate) OpenRemaining() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refuse {
		return g.left
	}
	return 0
}

func (g *gate) got() []pods.Result {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]pods.Result(nil), g.results...)
}

// admission is a queue of window slots per pod that counts honestly what is
// in flight: Acquire takes a slot on the first pod (in order) that is
// available, not excluded and has room, else waits for ctx's end or need's
// wait (block) or answers ErrQueueFull. err, if set, is every Acquire's answer. It records
// every Need and what each slot was settled to.
type admission struct {
	mu       sync.Mutex
	order    []string
	window   int
	inflight map[string]int
	avail    func(pod string) bool
	block    bool
	err      error
	needs    []Need
	settled  []int64
	released int
	double   int // releases of a slot already released: must stay 0
}

func (a *admission) Acquire(ctx context.Context, need Need, _ int, exclude []string) (Slot, error) {
	a.mu.Lock()
	a.needs = append(a.needs, need)
	err, block := a.err, a.block
	a.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if s := a.TryAcquire(need, exclude); s != nil {
		return s, nil
	}
	if !block {
		return nil, ErrQueueFull
	}
	if need.wait > 0 { // as the queue's adapter waits
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, need.wait)
		defer cancel()
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (a *admission) TryAcquire(_ Need, exclude []string) Slot {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.order {
		if contains(exclude, p) || a.avail != nil && !a.avail(p) || a.inflight[p] >= a.window {
			continue
		}
		a.inflight[p]++
		return &slot{a: a, pod: p}
	}
	return nil
}

func (a *admission) Dispatch() {}

func (a *admission) inFlight() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, v := range a.inflight {
		n += v
	}
	return n
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// slot is one of admission's slots.
type slot struct {
	a        *admission
	pod      string
	released bool
}

func (s *slot) Upstream() string { return s.pod }

func (s *slot) Settle(actual int64) {
	s.a.mu.Lock()
	defer s.a.mu.Unlock()
	s.a.settled = append(s.a.settled, actual)
}

func (s *slot) Release() {
	s.a.mu.Lock()
	defer s.a.mu.Unlock()
	if s.released {
		s.a.double++
		return
	}
	s.released = true
	s.a.inflight[s.pod]--
	s.a.released++
}

// limiterFunc is a Limiter whose Allow the test writes.
type limiterFunc func(key string) error

func (f limiterFunc) Allow(_ context.Context, key string) error { return f(key) }

// limitErr is a bucket's refusal with its wait.
type limitErr struct{ wait time.Duration }

func (e limitErr) Error() string             { return "rate limited" }
func (e limitErr) RetryAfter() time.Duration { return e.wait }

// recorder counts what the core reports.
type recorder struct {
	mu        sync.Mutex
	decisions map[string]int // "reason enforced" → count
	service   map[string]int64
}

func (r *recorder) Decided(decision string, enforced bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.decisions[decision+" "+strconv.FormatBool(enforced)]++
}
func (r *recorder) Waited(int64, time.Duration) {}
func (r *recorder) TenantService(tenant string, service int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.service[tenant] += service
}

func (r *recorder) decided(decision string, enforced bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.decisions[decision+" "+strconv.FormatBool(enforced)]
}

// rig is a Core over pods "a" (10.0.0.1:8000) and "b" (10.0.0.2:8000),
// each behind a recording error breaker, on the fake admission with a
// window of 4 each; the test may change any part before build.
type rig struct {
	t        *testing.T
	opts     Options
	pods     []pods.Pod
	gates    map[string]*gate
	lv       *levels
	adm      *admission
	rec      *recorder
	refused  []string // OnPodRefused calls
	outcomes map[Outcome]int
	core     *Core
}

func newRig(t *testing.T, pol Policy) *rig {
	t.Helper()
	r := &rig{t: t, gates: map[string]*gate{}, lv: &levels{critical: map[string]bool{}},
		rec: &recorder{decisions: map[string]int{}, service: map[string]int64{}}, outcomes: map[Outcome]int{}}
	r.adm = &admission{order: []string{"a", "b"}, window: 4, inflight: map[string]int{}}
	for i, name := range []string{"a", "b"} {
		u, _ := url.Parse("http://10.0.0." + strconv.Itoa(i+1) + ":8000")
		r.gates[name] = &gate{}
		r.pods = append(r.pods, pods.Pod{Name: name, URL: u, Gate: r.gates[name]})
	}
	r.opts = Options{Admission: r.adm, Recorder: r.rec, Policy: pol,
		OnPodRefused: func(pod string) { r.refused = append(r.refused, pod) }}
	return r
}

// build makes the core from the rig's parts.
func (r *rig) build() *Core {
	r.t.Helper()
	reg := pods.New(r.lv)
	reg.Set(r.pods)
	r.opts.Registry = reg
	r.adm.avail = func(p string) bool { return reg.Availability(p) == queue.Available }
	c, err := New(r.opts)
	if err != nil {
		r.t.Fatal(err)
	}
	r.core = c
	return c
}

// chat is a POST of body to /v1/chat/completions with hdr.
func chat(body string, hdr http.Header) In {
	if hdr == nil {
		hdr = http.Header{}
	}
	return In{Method: "POST", Path: "/v1/chat/completions", Header: hdr, Body: []byte(body)}
}

// decide runs in through the core and counts the outcome of a request that
// was not admitted.
func (r *rig) decide(ctx context.Context, in In) (*Request, Result) {
	req := new(Request)
	res := r.core.Decide(ctx, req, in)
	if o := res.Outcome(); o != "" {
		r.outcomes[o]++
	}
	return req, res
}

// finish ends an admitted request with e, counts its outcome and releases
// its slot, as a front does.
func (r *rig) finish(req *Request, adm *Admitted, e End) Ending {
	end := r.core.Finish(req, adm, e)
	if end.Outcome != "" {
		r.outcomes[end.Outcome]++
	}
	adm.Slot.Release()
	return end
}

// settled checks that every slot came back, once.
func (r *rig) settled() {
	r.t.Helper()
	if n := r.adm.inFlight(); n != 0 || r.adm.double != 0 {
		r.t.Fatalf("%d slots in flight, %d released twice; want none", n, r.adm.double)
	}
}

// retryAfter is a refusal's Retry-After header as a front writes it; ""
// when it sends none.
func retryAfter(rf *Refusal) string {
	if !rf.SendsRetryAfter() {
		return ""
	}
	return RetryAfterSeconds(rf.RetryAfter)
}
