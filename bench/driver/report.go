package main

import (
	"fmt"
	"io"
	"slices"
	"time"
)

type report struct {
	targets   []*attacker
	scenarios []scenario
	cells     map[string]*sample
	refusal   *refusal
	queue     *queueResult
}

func (r *report) cell(target, scenario string) *sample {
	k := target + "|" + scenario
	if r.cells[k] == nil {
		r.cells[k] = newSample()
	}
	return r.cells[k]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/1e6) }

// ratio is a ÷ b, or "–" where it would mean nothing (b ≤ 0, as an added
// latency below direct's can be).
func ratio(a, b float64) string {
	if b <= 0 || a < 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func (r *report) write(w io.Writer) {
	names := append(slices.Collect(func(yield func(string) bool) {
		for _, sc := range r.scenarios {
			if !yield(sc.name) {
				return
			}
		}
	}), "ttfb")
	fmt.Fprintln(w, "### Latency and throughput (ms; `+p50`/`+p99`: added over direct at the same rate)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | target | p50 | p99 | p99.9 | +p50 | +p99 | ok % | ok req/s |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, sc := range names {
		d := r.cell("direct", sc)
		for _, t := range r.targets {
			s := r.cell(t.name, sc)
			add50, add99 := "", ""
			if t.name != "direct" && sc != "saturation" {
				add50, add99 = ms(s.q(0.5)-d.q(0.5)), ms(s.q(0.99)-d.q(0.99))
			}
			label := sc
			if sc == "ttfb" {
				label = "stream first event"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %.2f | %.0f |\n", label, t.name,
				ms(s.q(0.5)), ms(s.q(0.99)), ms(s.q(0.999)), add50, add99, s.okShare(), s.rate())
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "### Gatekeeper ÷ nginx and ÷ HAProxy (below 1: gatekeeper better, except throughput)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | measure | gatekeeper | nginx | HAProxy | gk ÷ nginx | gk ÷ HAProxy |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: |")
	for _, sc := range names {
		g, n, h := r.cell("gatekeeper", sc), r.cell("nginx", sc), r.cell("haproxy", sc)
		if sc == "saturation" {
			fmt.Fprintf(w, "| %s | max req/s | %.0f | %.0f | %.0f | %s | %s |\n", sc, g.rate(), n.rate(), h.rate(),
				ratio(g.rate(), n.rate()), ratio(g.rate(), h.rate()))
			continue
		}
		d := r.cell("direct", sc)
		add := func(s *sample) float64 { return float64(s.q(0.99) - d.q(0.99)) }
		fmt.Fprintf(w, "| %s | p99 | %s | %s | %s | %s | %s |\n", sc, ms(g.q(0.99)), ms(n.q(0.99)), ms(h.q(0.99)),
			ratio(float64(g.q(0.99)), float64(n.q(0.99))), ratio(float64(g.q(0.99)), float64(h.q(0.99))))
		fmt.Fprintf(w, "| %s | added p99 | %s | %s | %s | %s | %s |\n", sc, ms(g.q(0.99)-d.q(0.99)), ms(n.q(0.99)-d.q(0.99)),
			ms(h.q(0.99)-d.q(0.99)), ratio(add(g), add(n)), ratio(add(g), add(h)))
	}
	if f := r.refusal; f != nil {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "### Refusal path (per-client limit %d req/s; a flood from one client beside %d req/s of admitted traffic from another)\n\n",
			f.perClientQPS, f.goodRate)
		fmt.Fprintln(w, "| phase | sent req/s | 429/s | 429 p50 | 429 p99 | 429 p99.9 | good p50 | good p99 | good ok % |")
		fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
		b, a := f.baseline, f.admitted
		fmt.Fprintf(w, "| good client alone | %.0f | – | – | – | – | %s | %s | %.2f |\n", float64(b.sent)/b.dur.Seconds(),
			ms(b.q(0.5)), ms(b.q(0.99)), b.okShare())
		fmt.Fprintf(w, "| flood at %d req/s (20×) | %.0f | %.0f | %s | %s | %s | %s | %s | %.2f |\n", f.floodRate,
			float64(f.flood.sent)/f.flood.dur.Seconds(), f.flood.rate(), ms(f.flood.q(0.5)), ms(f.flood.q(0.99)),
			ms(f.flood.q(0.999)), ms(a.q(0.5)), ms(a.q(0.99)), a.okShare())
		fmt.Fprintf(w, "| flood at saturation | %.0f | %.0f | %s | %s | %s | – | – | – |\n",
			float64(f.sat.sent)/f.sat.dur.Seconds(), f.sat.rate(), ms(f.sat.q(0.5)), ms(f.sat.q(0.99)), ms(f.sat.q(0.999)))
		fmt.Fprintf(w, "\nGatekeeper peak RSS over the whole refusal run (VmHWM): %.1f MiB.\n", float64(f.peakRSSKB)/1024)
	}
	r.writeQueue(w)
}

// writeQueue prints the queue section, if the run measured the queue.
func (r *report) writeQueue(w io.Writer) {
	if q := r.queue; q != nil {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "### Queue: %d waiting requests (one connection each) behind a one-slot window\n\n", q.waiters)
		n := float64(max(q.reached, 1))
		fmt.Fprintln(w, "| measure | before | with waiters | per waiter |")
		fmt.Fprintln(w, "| --- | ---: | ---: | ---: |")
		fmt.Fprintf(w, "| RSS (MiB) | %.1f | %.1f | %.1f KiB |\n", float64(q.rssKB[0])/1024, float64(q.rssKB[1])/1024,
			float64(q.rssKB[1]-q.rssKB[0])/n)
		for _, m := range []struct {
			name string
			v    [2]float64
		}{{"Go heap in use (MiB)", q.heap}, {"goroutine stacks (MiB)", q.stack}} {
			fmt.Fprintf(w, "| %s | %.1f | %.1f | %.1f KiB |\n", m.name, m.v[0]/(1<<20), m.v[1]/(1<<20), (m.v[1]-m.v[0])/n/1024)
		}
		fmt.Fprintf(w, "| goroutines | %.0f | %.0f | %.2f |\n", q.goroutines[0], q.goroutines[1], (q.goroutines[1]-q.goroutines[0])/n)
		if g := q.afterGC; g[1] > 0 {
			fmt.Fprintf(w, "| after a forced GC, waiters still queued: RSS / heap / stacks (MiB) | | %.1f / %.1f / %.1f | %.1f / %.1f / %.1f KiB |\n",
				g[0]/1024, g[1]/(1<<20), g[2]/(1<<20),
				(g[0]-float64(q.rssKB[0]))/n, (g[1]-q.heap[0])/n/1024, (g[2]-q.stack[0])/n/1024)
		}
		fmt.Fprintf(w, "\n%d of %d queued after %v; client errors %d; queue empty after the clients left: %v.\n",
			q.reached, q.waiters, q.waitedToFill.Round(time.Millisecond), q.clientFailures, q.drained)
	}
}
