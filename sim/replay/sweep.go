package replay

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// WriteSweep prints a seed sweep as Markdown, one section per scenario,
// gpu_memory_utilization and horizon: a table with one row per policy
// (SLO attainment first: its mean and its lowest seed; OOMs summed, with
// the seeds that had any; downtime; SLO goodput and raw goodput, means;
// the shares of requests abandoned, refused and failed), then one row per
// seed (each policy's attainment and OOMs), then how the policies that read
// the GPU compare with the baselines on every seed.
func WriteSweep(w io.Writer, results []Result) error {
	var b strings.Builder
	for _, g := range groupRuns(results) {
		fmt.Fprintf(&b, "#### %s, gpu_memory_utilization %.2f, %gh, seeds %s\n\n", g.scenario, g.util, g.horizon.Hours(), seedList(g.seeds))
		writeSummary(&b, g)
		b.WriteString("\n")
		writeSeeds(&b, g)
		b.WriteString("\n")
		writeVerdicts(&b, g)
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// runGroup is the runs of one scenario, utilization and horizon.
type runGroup struct {
	scenario string
	util     float64
	horizon  time.Duration
	policies []Policy
	seeds    []uint64
	runs     map[seedPolicy]Result
}

type seedPolicy struct {
	seed   uint64
	policy Policy
}

// groupRuns groups results in the order they first appear; policies and
// seeds keep their order too.
func groupRuns(results []Result) []*runGroup {
	var groups []*runGroup
	for _, r := range results {
		i := slices.IndexFunc(groups, func(g *runGroup) bool {
			return g.scenario == r.Scenario && g.util == r.GPUMemoryUtilization && g.horizon == r.Horizon
		})
		if i < 0 {
			groups = append(groups, &runGroup{scenario: r.Scenario, util: r.GPUMemoryUtilization, horizon: r.Horizon,
				runs: map[seedPolicy]Result{}})
			i = len(groups) - 1
		}
		g := groups[i]
		if !slices.Contains(g.policies, r.Policy) {
			g.policies = append(g.policies, r.Policy)
		}
		if !slices.Contains(g.seeds, r.Seed) {
			g.seeds = append(g.seeds, r.Seed)
		}
		g.runs[seedPolicy{r.Seed, r.Policy}] = r
	}
	for _, g := range groups {
		if g.scenario == "" {
			g.scenario = "trace"
		}
	}
	return groups
}

// writeSummary is the group's table with one row per policy.
func writeSummary(b *strings.Builder, g *runGroup) {
	b.WriteString("| policy | SLO attainment, mean (lowest) | OOMs Σ (seeds with any) | downtime Σ | SLO goodput | goodput | abandoned | refused | failed |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, p := range g.policies {
		var att, low, slo, good, aband, ref, fail float64
		var ooms, withOOM, n int64
		var down time.Duration
		for _, seed := range g.seeds {
			r, ok := g.runs[seedPolicy{seed, p}]
			if !ok {
				continue
			}
			n++
			a := r.SLOAttainment()
			if n == 1 || a < low {
				low = a
			}
			att += a
			ooms += r.OOMs
			if r.OOMs > 0 {
				withOOM++
			}
			down += r.Downtime
			slo += r.SLOGoodput()
			good += r.Goodput()
			arr := float64(max(r.Arrivals, 1))
			aband += float64(r.Requests.Abandoned) / arr
			ref += float64(r.Requests.Refused) / arr
			fail += float64(r.Requests.Failed) / arr
		}
		if n == 0 {
			continue
		}
		m := float64(n)
		fmt.Fprintf(b, "| %s | %s (%s) | %d (%d) | %s | %.0f | %.0f | %s | %s | %s |\n", p, pct(att/m), pct(low), ooms, withOOM,
			down.Round(time.Second), slo/m, good/m, pct(aband/m), pct(ref/m), pct(fail/m))
	}
}

// writeSeeds is the group's table with one row per seed.
func writeSeeds(b *strings.Builder, g *runGroup) {
	b.WriteString("| seed |")
	for _, p := range g.policies {
		fmt.Fprintf(b, " %s |", p)
	}
	b.WriteString("\n| ---: |" + strings.Repeat(" ---: |", len(g.policies)) + "\n")
	for _, seed := range g.seeds {
		fmt.Fprintf(b, "| %d |", seed)
		for _, p := range g.policies {
			if r, ok := g.runs[seedPolicy{seed, p}]; ok {
				fmt.Fprintf(b, " %s, %d OOM |", pct(r.SLOAttainment()), r.OOMs)
			} else {
				b.WriteString(" – |")
			}
		}
		b.WriteString("\n")
	}
}

// writeVerdicts compares each policy that reads the GPU with each baseline
// over the group's seeds: the attainment difference (mean and least), OOMs
// summed, and the seeds on which it had more OOMs.
func writeVerdicts(b *strings.Builder, g *runGroup) {
	for _, p := range []Policy{Gatekeeper, GatekeeperExporter} {
		if !slices.Contains(g.policies, p) {
			continue
		}
		for _, base := range []Policy{None, QPSOnly, DeadlineOnly} {
			if !slices.Contains(g.policies, base) {
				continue
			}
			var sum, least float64
			var ooms, baseOOMs, n int64
			var more []string
			for _, seed := range g.seeds {
				r, ok1 := g.runs[seedPolicy{seed, p}]
				q, ok2 := g.runs[seedPolicy{seed, base}]
				if !ok1 || !ok2 {
					continue
				}
				d := r.SLOAttainment() - q.SLOAttainment()
				if n == 0 || d < least {
					least = d
				}
				n++
				sum += d
				ooms += r.OOMs
				baseOOMs += q.OOMs
				if r.OOMs > q.OOMs {
					more = append(more, fmt.Sprintf("%d (%d against %d)", seed, r.OOMs, q.OOMs))
				}
			}
			if n == 0 {
				continue
			}
			line := fmt.Sprintf("- %s against %s: SLO attainment %+.1f points on average (least %+.1f); OOMs %d against %d",
				p, base, 100*sum/float64(n), 100*least, ooms, baseOOMs)
			if len(more) > 0 {
				line += "; more OOMs on seed " + strings.Join(more, ", ")
			}
			b.WriteString(line + "\n")
		}
	}
}

// seedList writes seeds as ranges: 1-10, 12.
func seedList(seeds []uint64) string {
	s := slices.Clone(seeds)
	slices.Sort(s)
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", s[i], s[j]))
		} else {
			parts = append(parts, fmt.Sprint(s[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// refused is the share of attempts refused (429 or 503).
func (r Result) refused() float64 {
	if r.Attempts == 0 {
		return 0
	}
	o := r.Outcomes
	return float64(o.RateLimited+o.Overloaded+o.QueueFull+o.QueueTimeout+o.Deadline) / float64(r.Attempts)
}

func pct(x float64) string { return fmt.Sprintf("%.1f %%", 100*x) }
