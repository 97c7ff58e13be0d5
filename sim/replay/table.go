package replay

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteTable prints results side by side, one column per run, followed by
// the ratios gatekeeper ÷ unprotected and gatekeeper ÷ qps-only when the
// runs include those policies (matched within each horizon).
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(label string, f func(Result) string) {
		fmt.Fprint(tw, label+"\t")
		for _, r := range results {
			fmt.Fprint(tw, f(r)+"\t")
		}
		fmt.Fprintln(tw)
	}
	row("horizon", func(r Result) string { return fmt.Sprintf("%gh", r.Horizon.Hours()) })
	if seeds(results) > 1 {
		row("seed", func(r Result) string { return fmt.Sprint(r.Seed) })
	}
	row("policy", func(r Result) string { return r.Policy.String() })
	row("SLO attainment", func(r Result) string { return fmt.Sprintf("%.1f%%", 100*r.SLOAttainment()) })
	row("OOM events", func(r Result) string { return fmt.Sprint(r.OOMs) })
	row("downtime", func(r Result) string { return r.Downtime.Round(time.Second).String() })
	row("SLO goodput tokens/s", func(r Result) string { return fmt.Sprintf("%.0f", r.SLOGoodput()) })
	row("goodput tokens/s", func(r Result) string { return fmt.Sprintf("%.0f", r.Goodput()) })
	row("requests", func(r Result) string { return fmt.Sprint(r.Arrivals) })
	row("  met / late", func(r Result) string { return fmt.Sprintf("%d / %d", r.Requests.Met, r.Requests.Late) })
	row("  abandoned by the user", func(r Result) string { return fmt.Sprint(r.Requests.Abandoned) })
	row("  refused, last retry too", func(r Result) string { return fmt.Sprint(r.Requests.Refused) })
	row("  failed, last retry too", func(r Result) string { return fmt.Sprint(r.Requests.Failed) })
	row("attempts (retries included)", func(r Result) string { return fmt.Sprint(r.Attempts) })
	row("  served", func(r Result) string { return fmt.Sprint(r.Outcomes.Served) })
	row("  failed (5xx, pod down)", func(r Result) string { return fmt.Sprint(r.Outcomes.UpstreamError) })
	row("  refused 429", func(r Result) string { return fmt.Sprint(r.Outcomes.RateLimited) })
	row("  refused 503 (overloaded, queue)", func(r Result) string {
		return fmt.Sprint(r.Outcomes.Overloaded + r.Outcomes.QueueFull + r.Outcomes.QueueTimeout)
	})
	row("  refused 503 (deadline)", func(r Result) string { return fmt.Sprint(r.Outcomes.Deadline) })
	row("  closed by the client", func(r Result) string { return fmt.Sprint(r.Outcomes.ClientClosed) })
	if len(results) > 0 {
		for i, c := range results[0].Classes {
			row("SLO attainment "+c.Name, func(r Result) string {
				cl := r.Classes[i]
				return fmt.Sprintf("%.1f%%", 100*float64(cl.Met)/float64(max(cl.Arrivals, 1)))
			})
		}
		for i, c := range results[0].Classes {
			row("p50 "+c.Name, func(r Result) string { return fmtDur(r.Classes[i].P50) })
			row("p99 "+c.Name, func(r Result) string { return fmtDur(r.Classes[i].P99) })
		}
		// Issue 5's "short-request p99 during recovery": requests that arrived
		// while gatekeeper's window was degraded or recovering.
		for i, c := range results[0].Classes {
			row("p99 "+c.Name+", recovery (served)", func(r Result) string {
				if !r.Policy.queued() {
					return "-"
				}
				cl := r.Classes[i]
				if cl.RecoveryServed == 0 {
					return "- (0)"
				}
				return fmt.Sprintf("%s (%d)", fmtDur(cl.RecoveryP99), cl.RecoveryServed)
			})
		}
	}
	row("time degraded / critical", func(r Result) string {
		if !r.Policy.queued() {
			return "-"
		}
		return fmt.Sprintf("%.0f%% / %.0f%%", 100*r.LevelTime[1].Seconds()/r.Horizon.Seconds(), 100*r.LevelTime[2].Seconds()/r.Horizon.Seconds())
	})
	row("mean window", func(r Result) string {
		if !r.Policy.queued() {
			return "-"
		}
		return fmt.Sprintf("%.0f", r.MeanWindow)
	})
	row("effective memory use", func(r Result) string { return fmt.Sprintf("%.1f%%", 100*r.EffectiveUtilization) })
	row("wall time", func(r Result) string { return r.Wall.Round(time.Millisecond).String() })
	if err := tw.Flush(); err != nil {
		return err
	}
	byKey := map[runKey]Result{}
	for _, r := range results {
		byKey[keyOf(r, r.Policy)] = r
	}
	for _, r := range results {
		if r.Policy != Gatekeeper && r.Policy != GatekeeperExporter {
			continue
		}
		for _, base := range []Policy{None, QPSOnly, DeadlineOnly} {
			b, ok := byKey[keyOf(r, base)]
			if !ok {
				continue
			}
			label := fmt.Sprintf("%gh", r.Horizon.Hours())
			if seeds(results) > 1 {
				label += fmt.Sprintf(" seed %d", r.Seed)
			}
			fmt.Fprintf(w, "%s %s vs %s: SLO attainment %+.1f points, OOMs %d vs %d, SLO goodput %.2f ×, goodput %.2f ×\n",
				label, r.Policy, base, 100*(r.SLOAttainment()-b.SLOAttainment()), r.OOMs, b.OOMs,
				r.SLOGoodput()/max(b.SLOGoodput(), 1e-9), r.Goodput()/max(b.Goodput(), 1e-9))
		}
	}
	return nil
}

// runKey names the run of a policy at one horizon and seed.
type runKey struct {
	horizon time.Duration
	seed    uint64
	policy  Policy
}

func keyOf(r Result, p Policy) runKey { return runKey{r.Horizon, r.Seed, p} }

// seeds counts the distinct seeds of results.
func seeds(results []Result) int {
	set := map[uint64]bool{}
	for _, r := range results {
		set[r.Seed] = true
	}
	return len(set)
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}
