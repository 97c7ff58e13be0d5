package replay

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// WriteRouting prints runs of a pool as Markdown: one row per seed, policy
// and routing (throughput in served requests and output tokens a second,
// time to first token p50 and p99, the pods' prefix-cache hit rate, OOMs,
// SLO attainment), then one row per policy and routing with the means over
// the seeds (OOMs summed), then, per policy, issue 37's target for the
// gatekeeper routing: at least prefix-only's throughput, at most its p99
// time to first token, no more OOMs than least-loaded, on every seed.
func WriteRouting(w io.Writer, results []Result) error {
	var b strings.Builder
	if len(results) > 0 {
		r := results[0]
		fmt.Fprintf(&b, "#### %s, %d pods, gpu_memory_utilization %.2f, %gh\n\n", cmp.Or(r.Scenario, "trace"), r.Pool.Pods,
			r.GPUMemoryUtilization, r.Horizon.Hours())
	}
	b.WriteString("| seed | policy | routing | req/s | output tok/s | TTFT p50 | TTFT p99 | prefix hit rate | OOMs | SLO attainment |\n")
	b.WriteString("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %d | %s | %s | %.2f | %.0f | %s | %s | %.1f %% | %d | %.1f %% |\n", r.Seed, r.Policy, r.Pool.Routing,
			r.Throughput(), r.Goodput(), fmtDur(r.Pool.TTFTP50), fmtDur(r.Pool.TTFTP99), 100*r.Pool.PrefixHitRate(), r.OOMs,
			100*r.SLOAttainment())
	}
	b.WriteString("\n| policy | routing | seeds | req/s | output tok/s | TTFT p50 | TTFT p99 | prefix hit rate | OOMs Σ | SLO attainment |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, k := range routingKeys(results) {
		m := meanOf(results, k)
		fmt.Fprintf(&b, "| %s | %s | %d | %.2f | %.0f | %s | %s | %.1f %% | %d | %.1f %% |\n", k.policy, k.routing, m.n,
			m.rps, m.tps, fmtDur(m.p50), fmtDur(m.p99), 100*m.hit, m.ooms, 100*m.slo)
	}
	b.WriteString("\n")
	for _, p := range policiesOf(results) {
		writeTarget(&b, results, p)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// routingKey is one policy and routing.
type routingKey struct {
	policy  Policy
	routing Routing
}

// routingKeys are the policies and routings of results, in order of first
// appearance.
func routingKeys(results []Result) []routingKey {
	var ks []routingKey
	for _, r := range results {
		if k := (routingKey{r.Policy, r.Pool.Routing}); !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	return ks
}

func policiesOf(results []Result) []Policy {
	var ps []Policy
	for _, r := range results {
		if !slices.Contains(ps, r.Policy) {
			ps = append(ps, r.Policy)
		}
	}
	return ps
}

// routingMean is the means over one key's seeds.
type routingMean struct {
	n        int
	rps, tps float64
	p50, p99 time.Duration
	hit, slo float64
	ooms     int64
}

func meanOf(results []Result, k routingKey) routingMean {
	var m routingMean
	var p50, p99 float64
	for _, r := range results {
		if r.Policy != k.policy || r.Pool.Routing != k.routing {
			continue
		}
		m.n++
		m.rps += r.Throughput()
		m.tps += r.Goodput()
		p50 += float64(r.Pool.TTFTP50)
		p99 += float64(r.Pool.TTFTP99)
		m.hit += r.Pool.PrefixHitRate()
		m.slo += r.SLOAttainment()
		m.ooms += r.OOMs
	}
	if m.n > 0 {
		n := float64(m.n)
		m.rps, m.tps, m.hit, m.slo = m.rps/n, m.tps/n, m.hit/n, m.slo/n
		m.p50, m.p99 = time.Duration(p50/n), time.Duration(p99/n)
	}
	return m
}

// writeTarget checks issue 37's target seed by seed, for one policy.
func writeTarget(b *strings.Builder, results []Result, p Policy) {
	find := func(seed uint64, rt Routing) (Result, bool) {
		i := slices.IndexFunc(results, func(r Result) bool { return r.Seed == seed && r.Policy == p && r.Pool.Routing == rt })
		if i < 0 {
			return Result{}, false
		}
		return results[i], true
	}
	var seeds int
	var thr, ttft, ooms []string // the seeds that miss each part
	for _, r := range results {
		if r.Policy != p || r.Pool.Routing != GatekeeperScore {
			continue
		}
		po, ok1 := find(r.Seed, PrefixOnly)
		ll, ok2 := find(r.Seed, LeastLoaded)
		if !ok1 || !ok2 {
			continue
		}
		seeds++
		seed := fmt.Sprint(r.Seed)
		if r.Outcomes.Served < po.Outcomes.Served || r.GeneratedTokens < po.GeneratedTokens {
			thr = append(thr, fmt.Sprintf("%s (%d against %d served, %d against %d tokens)", seed, r.Outcomes.Served,
				po.Outcomes.Served, r.GeneratedTokens, po.GeneratedTokens))
		}
		if r.Pool.TTFTP99 > po.Pool.TTFTP99 {
			ttft = append(ttft, seed)
		}
		if r.OOMs > ll.OOMs {
			ooms = append(ooms, seed)
		}
	}
	if seeds == 0 {
		return
	}
	missed := func(m []string) string {
		if len(m) == 0 {
			return fmt.Sprintf("all %d", seeds)
		}
		return fmt.Sprintf("%d (not %s)", seeds-len(m), strings.Join(m, ", "))
	}
	fmt.Fprintf(b, "- %s, the gatekeeper routing on %d seeds: throughput at least prefix-only's on %s; p99 TTFT at most prefix-only's on %s; OOMs no more than least-loaded's on %s\n",
		p, seeds, missed(thr), missed(ttft), missed(ooms))
}

// WriteScaling prints runs that sized their pool differently as Markdown:
// one row per seed and scaling (pods at most, GPU-hours, SLO attainment,
// TTFT p99, OOMs), then the means over the seeds per scaling.
func WriteScaling(w io.Writer, results []Result) error {
	var b strings.Builder
	if len(results) > 0 {
		r := results[0]
		fmt.Fprintf(&b, "#### %s, %s, gpu_memory_utilization %.2f, %gh\n\n", cmp.Or(r.Scenario, "trace"), r.Policy,
			r.GPUMemoryUtilization, r.Horizon.Hours())
	}
	b.WriteString("| seed | scaling | pods at start | pods at most | GPU-hours | SLO attainment | TTFT p99 | OOMs |\n")
	b.WriteString("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	type key struct {
		s    Scaling
		pods int
	}
	var keys []key
	for _, r := range results {
		k := key{r.Pool.Scaling, r.Pool.StartPods}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
		fmt.Fprintf(&b, "| %d | %s | %d | %d | %.2f | %.1f %% | %s | %d |\n", r.Seed, r.Pool.Scaling, k.pods, r.Pool.PeakPods,
			r.Pool.GPUTime.Hours(), 100*r.SLOAttainment(), fmtDur(r.Pool.TTFTP99), r.OOMs)
	}
	b.WriteString("\n| scaling | pods at start | seeds | GPU-hours | SLO attainment | OOMs Σ |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, k := range keys {
		var n int
		var gpu, slo float64
		var ooms int64
		for _, r := range results {
			if r.Pool.Scaling == k.s && r.Pool.StartPods == k.pods {
				n++
				gpu += r.Pool.GPUTime.Hours()
				slo += r.SLOAttainment()
				ooms += r.OOMs
			}
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %.2f | %.1f %% | %d |\n", k.s, k.pods, n, gpu/float64(n), 100*slo/float64(n), ooms)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
