package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// loadStreams reads the scenarios the stream mode wrote, one JSON file each.
func loadStreams(paths []string) ([]streamScenario, error) {
	var out []streamScenario
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var sc streamScenario
		if err := json.Unmarshal(b, &sc); err != nil {
			return nil, fmt.Errorf("driver: %s: %w", p, err)
		}
		out = append(out, sc)
	}
	return out, nil
}

func (sc *streamScenario) target(name string) *streamTarget {
	for i := range sc.Targets {
		if sc.Targets[i].Name == name {
			return &sc.Targets[i]
		}
	}
	return &streamTarget{Name: name, CPUS: -1, RSSPeakKB: -1}
}

// addedP99 is t's p99 chunk gap less direct's.
func (sc *streamScenario) addedP99(t *streamTarget) float64 {
	return t.GapP99MS - sc.target("direct").GapP99MS
}

// num formats v with prec decimals, "–" when negative (not measured).
func num(v float64, prec int) string {
	if v < 0 {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

// writeStreams renders the open-stream scenarios for the "Open streams"
// section of RESULTS.md (bench/run writes its heading).
func writeStreams(w io.Writer, scs []streamScenario) {
	if len(scs) == 0 {
		return
	}
	s0 := scs[0]
	fmt.Fprintf(w, "Each stream POSTs a %d-byte chat prompt (`\"stream\": true`) and gets %d chunks of about %d bytes, one every %.0f ms,\n",
		s0.PromptBytes, s0.Chunks, s0.ChunkBytes, s0.IntervalMS)
	fmt.Fprintf(w, "then a usage chunk and `[DONE]`; the streams open evenly over %.1f s and stay open together. Each scenario\n", s0.RampS)
	fmt.Fprintln(w, "runs against freshly started proxies (gatekeeper :18380, nginx :18381, HAProxy :18382), one target at a time.")
	fmt.Fprintln(w, "CPU: utime + stime of the proxy's processes (nginx: its workers; HAProxy, gatekeeper: the process) from")
	fmt.Fprintln(w, "`/proc/PID/stat` before the first stream and after the last, over the chunks the clients received. Memory: the")
	fmt.Fprintln(w, "largest summed VmRSS sampled every 100 ms while streams were open, less VmRSS before, over the most streams")
	fmt.Fprintln(w, "open at once. Gap: time between two consecutive content chunks arriving at the client; `+p99` is over direct.")
	fmt.Fprintln(w, "Lost: a stream that errored, was not answered 200, or did not carry every chunk and `[DONE]`.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| streams | target | opened | peak open | lost | chunks relayed | CPU s | CPU s per 1M chunks | RSS before (MiB) | RSS open (MiB) | KiB per stream | gap p50 (ms) | gap p99 | gap p99.9 | gap max | +p99 gap |")
	fmt.Fprintln(w, "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, sc := range scs {
		for _, name := range []string{"direct", "gatekeeper", "nginx", "haproxy"} {
			t := sc.target(name)
			add := ""
			if name != "direct" {
				add = fmt.Sprintf("%.2f", sc.addedP99(t))
			}
			rss := func(kb int64) string { return num(float64(kb)/1024, 1) }
			fmt.Fprintf(w, "| %d | %s | %d | %d | %d | %d | %s | %s | %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %s |\n",
				sc.Streams, name, t.Opened, t.PeakOpen, t.Lost, t.Chunks, num(t.CPUS, 2), num(t.cpuPerMillion(), 2),
				rss(t.RSSBeforeKB), rss(t.RSSPeakKB), num(t.kibPerStream(), 1), t.GapP50MS, t.GapP99MS, t.GapP999MS, t.GapMaxMS, add)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Gatekeeper ÷ nginx and ÷ HAProxy (below 1: gatekeeper better):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| streams | measure | gatekeeper | nginx | HAProxy | gk ÷ nginx | gk ÷ HAProxy |")
	fmt.Fprintln(w, "| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
	for _, sc := range scs {
		g, n, h := sc.target("gatekeeper"), sc.target("nginx"), sc.target("haproxy")
		rows := []struct {
			measure string
			f       func(*streamTarget) float64
			prec    int
		}{
			{"CPU s per 1M chunks", (*streamTarget).cpuPerMillion, 2},
			{"KiB per open stream", (*streamTarget).kibPerStream, 1},
			{"added p99 gap (ms)", sc.addedP99, 2},
			{"streams lost", func(t *streamTarget) float64 { return float64(t.Lost) }, 0},
		}
		for _, r := range rows {
			gv, nv, hv := r.f(g), r.f(n), r.f(h)
			v := func(x float64) string { return fmt.Sprintf("%.*f", r.prec, x) }
			if r.measure != "added p99 gap (ms)" { // the others are never below zero when measured
				v = func(x float64) string { return num(x, r.prec) }
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s |\n", sc.Streams, r.measure,
				v(gv), v(nv), v(hv), ratio(gv, nv), ratio(gv, hv))
		}
	}
	fmt.Fprintln(w)
	writeStreamTargets(w, scs)
	var notes []string
	for _, sc := range scs {
		for _, n := range sc.Notes {
			notes = append(notes, fmt.Sprintf("%d streams: %s.", sc.Streams, n))
		}
		for _, t := range sc.Targets {
			if t.Lost > 0 {
				var why []string
				for k, v := range t.LostWhy {
					why = append(why, fmt.Sprintf("%s × %d", k, v))
				}
				slices.Sort(why)
				notes = append(notes, fmt.Sprintf("%d streams, %s lost %d: %s (first error: %q).", sc.Streams, t.Name, t.Lost,
					strings.Join(why, ", "), t.LostExample))
			}
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintln(w, "- "+n)
		}
	}
}

// writeStreamTargets says which of issue 16's targets for gatekeeper this
// run met, at every stream count. An nginx figure below zero (an added gap under direct's, noise)
// counts as zero.
func writeStreamTargets(w io.Writer, scs []streamScenario) {
	fmt.Fprintln(w, "Issue 16's targets for gatekeeper, this run (the issue sets the gap target at 3 000 streams):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | streams | gatekeeper | nginx | met |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | --- |")
	met := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "**no**"
	}
	for _, sc := range scs {
		g, n := sc.target("gatekeeper"), sc.target("nginx")
		gc, nc := g.cpuPerMillion(), n.cpuPerMillion()
		fmt.Fprintf(w, "| CPU per 1M chunks ≤ 1.2 × nginx | %d | %s s | %s s | %s (%s×) |\n", sc.Streams, num(gc, 2), num(nc, 2),
			met(gc >= 0 && nc > 0 && gc <= 1.2*nc), ratio(gc, nc))
		gm, nm := g.kibPerStream(), n.kibPerStream()
		fmt.Fprintf(w, "| memory per open stream ≤ 1.5 × nginx | %d | %s KiB | %s KiB | %s (%s×) |\n", sc.Streams, num(gm, 1), num(nm, 1),
			met(gm >= 0 && nm > 0 && gm <= 1.5*nm), ratio(gm, nm))
		ga, na := sc.addedP99(g), sc.addedP99(n)
		verdict := met(ga <= 2*max(na, 0))
		if d := sc.target("direct").GapP99MS; d > 2*sc.IntervalMS {
			// Without a proxy the chunks already came late: the machine,
			// not a proxy, set the gaps, and their differences are noise.
			verdict = fmt.Sprintf("not measurable here (direct's own p99 gap %.0f ms, %.1f× the %.0f ms pace: the machine is saturated)",
				d, d/sc.IntervalMS, sc.IntervalMS)
		}
		fmt.Fprintf(w, "| added p99 gap ≤ 2 × nginx | %d | %.2f ms | %.2f ms | %s |\n", sc.Streams, ga, na, verdict)
		fmt.Fprintf(w, "| no stream lost | %d | %d | %d | %s |\n", sc.Streams, g.Lost, n.Lost, met(g.Lost == 0 && g.Opened > 0))
	}
}
