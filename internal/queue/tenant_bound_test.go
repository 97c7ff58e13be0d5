package queue

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// backlogPairs measures VTC's bound: for every two tenants, over each
// interval in which both have waiters, how far the service they were
// granted (each ÷ its weight) has drifted apart since the interval began.
type backlogPairs struct {
	weight  []float64
	waiting []int
	norm    []float64    // service granted ÷ weight, so far
	base    [][]float64  // norm[i] - norm[j] when the pair's interval began
	active  [][]bool     // both i and j have waiters
	worst   float64      // the largest drift seen
	grants  int          // grants made while the granted tenant's pair was active
	where   string       // the worst drift's step, for the failure message
	checked map[int]bool // tenants seen granted inside an interval
}

func newBacklogPairs(weights []float64) *backlogPairs {
	n := len(weights)
	p := &backlogPairs{weight: weights, waiting: make([]int, n), norm: make([]float64, n), checked: map[int]bool{}}
	for range n {
		p.base = append(p.base, make([]float64, n))
		p.active = append(p.active, make([]bool, n))
	}
	return p
}

// queued counts a waiter of tenant i; the pairs it completes begin.
func (p *backlogPairs) queued(i int) {
	p.waiting[i]++
	if p.waiting[i] > 1 {
		return
	}
	for j := range p.waiting {
		if j != i && p.waiting[j] > 0 {
			p.active[i][j], p.active[j][i] = true, true
			p.base[i][j], p.base[j][i] = p.norm[i]-p.norm[j], p.norm[j]-p.norm[i]
		}
	}
}

// granted counts a grant of service to tenant i; waited says it came from
// the queue (not at once on arrival). Its pairs are checked, then end if i
// has no waiter left.
func (p *backlogPairs) granted(i int, service int64, waited bool, at string) {
	p.norm[i] += float64(service) / p.weight[i]
	if !waited {
		return
	}
	for j := range p.waiting {
		if !p.active[i][j] {
			continue
		}
		p.grants++
		p.checked[i] = true
		if d := math.Abs(p.norm[i] - p.norm[j] - p.base[i][j]); d > p.worst {
			p.worst, p.where = d, fmt.Sprintf("%s: tenants %d and %d", at, i, j)
		}
	}
	p.waiting[i]--
	if p.waiting[i] == 0 {
		for j := range p.waiting {
			p.active[i][j], p.active[j][i] = false, false
		}
	}
}

// TestVTCBound: with random arrivals of 2 to 4 tenants of random weights and
// services on 1 to 3 windows, in either order, no two tenants' service (÷
// weight) drifts apart by more than 2 × the largest single request's
// service ÷ weight while both are backlogged (the package doc's bound).
func TestVTCBound(t *testing.T) {
	t.Parallel()
	for seed := range uint64(40) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(seed, 2024))
			n := 2 + r.IntN(3)
			weights := make([]float64, n)
			maxService := make([]int64, n) // tenants differ in request sizes too
			for i := range n {
				weights[i] = []float64{1, 1, 2, 3, 0.5}[r.IntN(5)]
				maxService[i] = 1 + int64(r.IntN(2000))
			}
			c, err := NewCore(Settings{MaxLength: 10_000, MaxTokens: 1 << 40})
			if err != nil {
				t.Fatal(err)
			}
			wins := 1 + r.IntN(3)
			for w := range wins {
				c.SetWindow(fmt.Sprint("w", w), 1+r.IntN(4))
			}
			if r.IntN(2) == 0 {
				c.SetOrder(ShortestFirst)
			}
			p := newBacklogPairs(weights)
			tenantOf := map[string]int{}
			var held []Grant
			var u float64 // the largest service ÷ weight of one request
			now := t0
			for step := range 4000 {
				now = now.Add(time.Duration(r.IntN(50)) * time.Millisecond)
				at := fmt.Sprintf("step %d", step)
				if r.IntN(100) < 52 || len(held) == 0 { // arrivals slightly outpace releases: long backlogs
					i := r.IntN(n)
					q := Request{ID: uint64(step + 1), Tenant: fmt.Sprint("t", i), Weight: weights[i],
						Service: 1 + r.Int64N(maxService[i]), Tokens: r.Int64N(4000)}
					tenantOf[q.Tenant] = i
					u = max(u, float64(q.Service)/weights[i])
					g, ok, err := c.Enqueue(now, q)
					switch {
					case err != nil:
						t.Fatalf("%s: Enqueue = %v", at, err)
					case ok:
						p.granted(i, g.Service, false, at)
						held = append(held, g)
					default:
						p.queued(i)
					}
					continue
				}
				j := r.IntN(len(held))
				g := held[j]
				held = slices.Delete(held, j, j+1)
				for _, ng := range c.Release(now, g.Upstream, g.Cost) {
					p.granted(tenantOf[ng.Tenant], ng.Service, true, at)
					held = append(held, ng)
				}
			}
			if p.worst > 2*u {
				t.Fatalf("service drifted %.1f apart while backlogged (%s), bound 2 × %.1f", p.worst, p.where, u)
			}
			if p.grants < 500 || len(p.checked) < 2 {
				t.Fatalf("only %d grants (tenants %v) inside backlogged intervals: the test does not exercise the bound", p.grants, p.checked)
			}
			t.Logf("%d tenants, weights %v: worst drift %.1f of 2 × %.1f over %d grants", n, weights, p.worst, u, p.grants)
		})
	}
}
