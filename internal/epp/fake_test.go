package epp

import (
	"context"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// The test Decider's behaviours, chosen by the request's X-Test header.
const (
	testShed       = "shed"        // refuse with 429 and Retry-After
	testQueue      = "queue"       // wait as if queued until the stream ends
	testAdmitLarge = "admit-large" // admit a TooLarge request rather than refuse it
	testNoAnswer   = "no-answer"   // break the contract: neither pick nor refusal
	testNoEndpoint = "no-endpoint" // break the contract: a pick of no endpoint
	testScores     = "scores"      // score the picked endpoints 1, 1/2, ..., and two more (one NaN)
)

// fakeDecider is the test double of the decision core: it picks the first
// endpoint of its pool that the request's subset allows (503 when none
// does), and counts the slots it hands out. held goes up before a pick is
// returned and down inside its Done, so it never reads lower than the truth.
type fakeDecider struct {
	pool  []string
	max   int64
	ready atomic.Bool

	mu       sync.Mutex          // guards the fields below
	handed   int                 // picks handed out
	held     int                 // picks not yet released
	doubles  int                 // Done calls after a pick's first
	requests []Request           // what Decide was asked, in order
	contexts []trace.SpanContext // the span context of each Decide's ctx, in order

	ends     chan End      // every release, in order
	queued   chan struct{} // a request began to wait as queued
	returned chan struct{} // a queued request's Decide returned
}

func newFakeDecider(pool ...string) *fakeDecider {
	if len(pool) == 0 {
		pool = []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}
	}
	return &fakeDecider{pool: pool, max: 1 << 20, ends: make(chan End, 4096),
		queued: make(chan struct{}, 16), returned: make(chan struct{}, 16)}
}

func (d *fakeDecider) MaxBodyBytes() int64 { return d.max }
func (d *fakeDecider) Ready() bool         { return d.ready.Load() }

func (d *fakeDecider) Decide(ctx context.Context, r *Request) (*Pick, *Refusal) {
	d.mu.Lock()
	d.requests = append(d.requests, *r)
	d.contexts = append(d.contexts, trace.SpanContextFromContext(ctx))
	d.mu.Unlock()
	switch test := r.Header.Get("X-Test"); {
	case test == testShed:
		return nil, &Refusal{Status: http.StatusTooManyRequests,
			Header: http.Header{"Retry-After": {"7"}, "Content-Type": {"application/json"}, "X-Gatekeeper-Reason": {"shed_priority"}},
			Body:   []byte(`{"error":{"message":"shed","type":"rate_limit_error","param":null,"code":"shed_priority"}}`)}
	case test == testQueue:
		d.queued <- struct{}{}
		<-ctx.Done() // the core's queue waits on ctx
		defer func() { d.returned <- struct{}{} }()
		return nil, &Refusal{Status: 499}
	case test == testNoAnswer:
		return nil, nil
	case r.TooLarge && test != testAdmitLarge:
		return nil, &Refusal{Status: http.StatusRequestEntityTooLarge, Body: []byte(`{"error":{}}`)}
	}
	var eligible []string
	for _, ep := range d.pool {
		if r.Subset == nil || slices.Contains(r.Subset, ep) {
			eligible = append(eligible, ep)
		}
	}
	if r.Header.Get("X-Test") == testNoEndpoint {
		eligible = nil
	} else if len(eligible) == 0 {
		return nil, &Refusal{Status: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"1"}}}
	}
	p := d.hand(eligible)
	if r.Header.Get("X-Test") == testScores {
		for i, ep := range eligible {
			p.Scores = append(p.Scores, EndpointScore{Endpoint: ep, Score: 1 / float64(i+1)})
		}
		p.Scores = append(p.Scores, EndpointScore{"10.0.0.9:8000", 0.125}, EndpointScore{"10.0.0.8:8000", math.NaN()})
	}
	return p, nil
}

// hand counts a slot out and returns its pick.
func (d *fakeDecider) hand(endpoints []string) *Pick {
	d.mu.Lock()
	d.handed++
	d.held++
	d.mu.Unlock()
	released := false
	return &Pick{Endpoints: endpoints, Done: func(e End) {
		d.mu.Lock()
		first := !released
		released = true
		if first {
			d.held--
		} else {
			d.doubles++
		}
		d.mu.Unlock()
		if first {
			d.ends <- e
		}
	}}
}

// counts returns the picks handed out and still held.
func (d *fakeDecider) counts() (handed, held, doubles int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.handed, d.held, d.doubles
}

// lastRequest is the last Request Decide was asked.
func (d *fakeDecider) lastRequest(t *testing.T) Request {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.requests) == 0 {
		t.Fatal("Decide was not called")
	}
	return d.requests[len(d.requests)-1]
}

// end waits for the next release: the server may release just after its
// last answer reaches the test, so this waits on the event, with a bound
// that only a hung server reaches.
func (d *fakeDecider) end(t *testing.T) End {
	t.Helper()
	select {
	case e := <-d.ends:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no pick was released")
		return End{}
	}
}

// settled checks that every pick handed out was released exactly once and
// that no release is left unread.
func (d *fakeDecider) settled(t *testing.T) {
	t.Helper()
	if handed, held, doubles := d.counts(); held != 0 || doubles != 0 {
		t.Errorf("of %d picks, %d still held and %d released twice; want none", handed, held, doubles)
	}
	if n := len(d.ends); n != 0 {
		t.Errorf("%d releases unchecked", n)
	}
}
