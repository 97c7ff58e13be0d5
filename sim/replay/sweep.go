package replay

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// WriteSweep prints a seed sweep as a Markdown table: one row per horizon
// and seed, for each policy its OOMs, SLO goodput (tokens/s) and SLO
// attainment, then gatekeeper's SLO goodput and attainment ÷ unprotected's
// and its SLO goodput ÷ qps-only's, its time degraded and its refusals; a
// last row per horizon sums the OOMs, averages the figures and gives each
// ratio's lowest value over the seeds (the targets hold on every seed).
func WriteSweep(w io.Writer, results []Result) error {
	var policies []Policy
	var horizons []time.Duration
	byKey := map[runKey]Result{}
	seedsOf := map[time.Duration][]uint64{}
	for _, r := range results {
		if !slices.Contains(policies, r.Policy) {
			policies = append(policies, r.Policy)
		}
		if !slices.Contains(horizons, r.Horizon) {
			horizons = append(horizons, r.Horizon)
		}
		if !slices.Contains(seedsOf[r.Horizon], r.Seed) {
			seedsOf[r.Horizon] = append(seedsOf[r.Horizon], r.Seed)
		}
		byKey[keyOf(r, r.Policy)] = r
	}
	_, hasNone := index(policies, None)
	_, hasQPS := index(policies, QPSOnly)
	_, hasGK := index(policies, Gatekeeper)
	head := []string{"horizon", "seed"}
	for _, p := range policies {
		head = append(head, p.String()+" OOMs", p.String()+" SLO goodput", p.String()+" attainment")
	}
	if hasGK && hasNone {
		head = append(head, "SLO goodput ÷ unprotected", "attainment ÷ unprotected")
	}
	if hasGK && hasQPS {
		head = append(head, "SLO goodput ÷ qps-only")
	}
	if hasGK {
		head = append(head, "degraded", "refused")
	}
	var b strings.Builder
	line := func(cells []string) { b.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	line(head)
	seps := make([]string, len(head))
	for i := range seps {
		seps[i] = "---:"
	}
	seps[0], seps[1] = "---", "---"
	line(seps)
	for _, h := range horizons {
		ss := seedsOf[h]
		var sum sweepSum
		sum.init(len(policies))
		for _, seed := range ss {
			cells := []string{fmt.Sprintf("%gh", h.Hours()), fmt.Sprint(seed)}
			for i, p := range policies {
				r, ok := byKey[runKey{h, seed, p}]
				if !ok {
					cells = append(cells, "–", "–", "–")
					continue
				}
				sum.add(i, r)
				cells = append(cells, fmt.Sprint(r.OOMs), fmt.Sprintf("%.0f", r.SLOGoodput()), pct(r.SLOAttainment()))
			}
			g, gok := byKey[runKey{h, seed, Gatekeeper}]
			u, uok := byKey[runKey{h, seed, None}]
			q, qok := byKey[runKey{h, seed, QPSOnly}]
			if hasGK && hasNone {
				cells = append(cells, sum.ratio(0, gok && uok, g.SLOGoodput(), u.SLOGoodput()),
					sum.ratio(1, gok && uok, g.SLOAttainment(), u.SLOAttainment()))
			}
			if hasGK && hasQPS {
				cells = append(cells, sum.ratio(2, gok && qok, g.SLOGoodput(), q.SLOGoodput()))
			}
			if hasGK {
				if gok {
					cells = append(cells, pct(g.LevelTime[1].Seconds()/g.Horizon.Seconds()), pct(g.refused()))
				} else {
					cells = append(cells, "–", "–")
				}
			}
			line(cells)
		}
		cells := []string{fmt.Sprintf("%gh", h.Hours()), fmt.Sprintf("all %d: Σ, mean, lowest", len(ss))}
		for i := range policies {
			cells = append(cells, fmt.Sprint(sum.ooms[i]), fmt.Sprintf("%.0f", sum.slo[i]/float64(max(sum.n[i], 1))),
				pct(sum.att[i]/float64(max(sum.n[i], 1))))
		}
		if hasGK && hasNone {
			cells = append(cells, sum.lowest(0), sum.lowest(1))
		}
		if hasGK && hasQPS {
			cells = append(cells, sum.lowest(2))
		}
		if hasGK {
			cells = append(cells, "", "")
		}
		line(cells)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// sweepSum accumulates one horizon's rows.
type sweepSum struct {
	ooms     []int64
	slo, att []float64
	n        []int
	low      [3]float64 // lowest of each ratio column; 0 before the first
}

func (s *sweepSum) init(policies int) {
	s.ooms, s.slo, s.att, s.n = make([]int64, policies), make([]float64, policies), make([]float64, policies), make([]int, policies)
}

func (s *sweepSum) add(i int, r Result) {
	s.ooms[i] += r.OOMs
	s.slo[i] += r.SLOGoodput()
	s.att[i] += r.SLOAttainment()
	s.n[i]++
}

// ratio formats a ÷ b and keeps the lowest of column col.
func (s *sweepSum) ratio(col int, ok bool, a, b float64) string {
	if !ok || b <= 0 {
		return "–"
	}
	x := a / b
	if s.low[col] == 0 || x < s.low[col] {
		s.low[col] = x
	}
	return fmt.Sprintf("%.2f ×", x)
}

func (s *sweepSum) lowest(col int) string {
	if s.low[col] == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f ×", s.low[col])
}

// refused is the share of arrivals refused (429 or 503).
func (r Result) refused() float64 {
	if r.Arrivals == 0 {
		return 0
	}
	o := r.Outcomes
	return float64(o.RateLimited+o.Overloaded+o.QueueFull+o.QueueTimeout+o.Deadline) / float64(r.Arrivals)
}

func pct(x float64) string { return fmt.Sprintf("%.1f %%", 100*x) }

func index(ps []Policy, p Policy) (int, bool) {
	i := slices.Index(ps, p)
	return i, i >= 0
}
