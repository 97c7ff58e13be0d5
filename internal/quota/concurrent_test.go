package quota

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestConcurrentStreams is the test (BerriAI/litellm#18730: 64
// concurrent streams overspent a TPM limit 6.6×). 64 clients, each its own
// goroutine, loop charge → stream → settle against one class's quota of Q
// tokens per minute, with actuals from 0 to twice the charge, on a clock
// that a driver advances in ticks of 100 ms. Each tick has two phases,
// each a barrier: first every client whose stream ended settles, then
// every client whose pause ended charges, all at once. After each tick the
// driver asserts, for the true sliding minute that ends now, the bound of
// the package comment (see ledger):
//
//	Σ actual of the requests admitted in it
//	  ≤ Q + Σ max(0, actual − charge) of those in flight at its last admission
//	  ≤ Q + Σ charge of those in flight at its last admission (actual ≤ 2 × charge)
//
// The first phase's settles precede the second's charges, so "in flight at
// the last admission" is exact: not settled by the end of that tick's
// first phase. No sleeps: the clock moves only between phases, when every
// client waits at the barrier.
func TestConcurrentStreams(t *testing.T) {
	t.Parallel()
	const (
		clients = 64
		Q       = 200000 // tokens per minute: some 120 requests
		tick    = 100 * time.Millisecond
		ticks   = 3000 // five minutes
	)
	q, clk := newQuotas(t, Settings{})
	if err := q.SetLimits(Limits{Classes: map[string]Limit{"chat": {PerMinute: Q}}}); err != nil {
		t.Fatal(err)
	}
	var led ledger
	var tickNow int64 // written by the driver between phases only
	phase := make([]chan int, clients)
	ack := make(chan struct{})
	var stats struct {
		sync.Mutex
		admitted, refused int
	}
	var wg sync.WaitGroup
	for i := range clients {
		phase[i] = make(chan int)
		wg.Go(func() {
			c := &streamer{rng: rand.New(rand.NewPCG(1, uint64(i)))}
			for p := range phase[i] {
				admitted, refused := c.step(q, &led, p, tickNow, Q)
				stats.Lock()
				stats.admitted += admitted
				stats.refused += refused
				stats.Unlock()
				ack <- struct{}{}
			}
		})
	}
	for n := int64(1); n <= ticks; n++ {
		clk.Advance(tick)
		tickNow = n
		for p := range 2 {
			for i := range clients {
				phase[i] <- p
			}
			for range clients {
				<-ack
			}
		}
		used, bound, inFlight := led.window(clk.Now(), Minute, Q)
		if used > bound || used > Q+inFlight {
			t.Fatalf("tick %d: the last minute's admissions use %d tokens, want ≤ %d (Q + underestimates in flight) ≤ %d (Q + charges in flight)",
				n, used, bound, Q+inFlight)
		}
	}
	for i := range clients {
		close(phase[i])
	}
	wg.Wait()
	t.Logf("%d admitted, %d refused", stats.admitted, stats.refused)
	if stats.admitted < 400 || stats.refused == 0 {
		t.Errorf("%d admitted, %d refused: want ≥ 400 admitted and some refused", stats.admitted, stats.refused)
	}
}

// streamer is one client of TestConcurrentStreams: it pauses, charges,
// streams for a while and settles, over and over.
type streamer struct {
	rng     *rand.Rand
	next    int64 // the tick at which to charge (paused) or settle (streaming)
	settler Settler
	row     *admitted
	charge  int64
	est     int64 // the estimate of the request to charge; 0: a new one
}

// step runs one phase (0: settle, 1: charge) of tick now and reports what
// it admitted and refused.
func (c *streamer) step(q *Quotas, led *ledger, p int, now int64, limit int64) (nAdmitted, nRefused int) {
	switch {
	case p == 0 && c.settler != nil && now >= c.next:
		c.settler.Settle(c.row.actual)
		led.settle(c.row, 2*now) // before every admission of this tick (2·now+1)
		c.settler, c.row = nil, nil
		c.next = now + c.rng.Int64N(20) // a pause of up to 2 s
	case p == 1 && c.settler == nil && now >= c.next:
		if c.est == 0 {
			c.est = 100 + c.rng.Int64N(3000)
		}
		s, err := q.Charge(context.Background(), Ask{Class: "chat", Estimate: c.est})
		if err != nil {
			var ra interface{ RetryAfter() time.Duration }
			if !errors.As(err, &ra) {
				panic(err)
			}
			c.next = now + int64((ra.RetryAfter()+99*time.Millisecond)/(100*time.Millisecond))
			return 0, 1
		}
		c.charge = min(c.est, limit)
		c.row = &admitted{at: q.now(), key: 2*now + 1, charge: c.charge, actual: c.rng.Int64N(2*c.charge + 1)}
		led.admit(c.row)
		c.settler, c.est = s, 0
		c.next = now + 2 + c.rng.Int64N(100) // streams for 0.2 to 10 s
		return 1, 0
	}
	return 0, 0
}

// TestConcurrentHammer runs every method at once (charges of more client
// keys than remembered, settles, snapshots, reloads, a moving clock); the
// race detector does the checking, and no count goes negative.
func TestConcurrentHammer(t *testing.T) {
	t.Parallel()
	q, clk := newQuotas(t, Settings{maxClients: 32})
	lim := Limits{PerClient: Limit{PerMinute: 5000, PerDay: 50000}, Classes: map[string]Limit{"a": {PerMinute: 20000}},
		Models: map[string]Limit{"m": {PerDay: 100000}}}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(2, uint64(i)))
			for range 3000 {
				s, _ := q.Charge(context.Background(), Ask{Client: strconv.Itoa(r.IntN(64)), Class: "a", Model: "m", Estimate: r.Int64N(2000)})
				s.Settle(r.Int64N(3000))
				s.Settle(0) // a no-op
			}
		})
	}
	wg.Go(func() {
		for i := range 300 {
			clk.Advance(time.Duration(i%7) * 300 * time.Millisecond)
			lim.Classes = map[string]Limit{"a": {PerMinute: int64(10000 + i)}}
			if err := q.SetLimits(lim); err != nil {
				t.Error(err)
			}
			checkNonNegative(t, q.Snapshot())
		}
	})
	wg.Wait()
	if n := q.Snapshot().Clients.Count; n > 32 {
		t.Errorf("%d client keys remembered, want ≤ MaxClients 32", n)
	}
}
