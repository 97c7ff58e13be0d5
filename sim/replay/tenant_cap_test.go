package replay

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// capSeeds, when set, sweeps the heavy tenant's max_share on issue 26's
// two-tenant scenario and prints, per cap, the light tenant's p99 TTFT ÷ its
// solo value, where its slowest 1 % spent their time, and what the cap cost
// the heavy tenant (sim/replay/README.md, "Issue 37"):
//
//	go test ./sim/replay -run TestTenantCapSweep -cap-seeds 101-110 -cap-hours 1 -v
var (
	capSeeds = flag.String("cap-seeds", "", "sweep heavy's max_share on these seeds (from-to) and print the table")
	capHours = flag.Float64("cap-hours", 1, "the horizon of -cap-seeds, in virtual hours")
	capList  = flag.String("caps", "1,0.75,0.5,0.35,0.25", "heavy's max_share values of -cap-seeds")
	capLight = flag.Float64("cap-light-min", 0, "light's min_share in every run of -cap-seeds")
	capPods  = flag.Bool("cap-parts", false, "with -cap-seeds: also print each run's TTFT breakdown")
	capQPS   = flag.Float64("cap-client-qps", 0, "with -cap-seeds: fast_breaker.per_client.qps, keyed by tenant (0: off)")
	capBatch = flag.Int("cap-batch-tokens", 0, "with -cap-seeds: the pod's max_num_batched_tokens (0: vLLM's default, 8192 on an H100)")
	capShare = flag.Bool("cap-share-qps", true, "with -cap-seeds: the shares split the fast breaker's global bucket too (fairness.share_fast_breaker, true by default)")
)

// capRun is one seed's run at one cap.
type capRun struct {
	seed         uint64
	cap          float64
	light, heavy TenantResult
	pod          podLoad
}

// podLoad is the pod's mean running and waiting sequences over a run.
type podLoad struct{ running, waiting, window float64 }

func meanLoad(ss []Sample) podLoad {
	var l podLoad
	for _, s := range ss {
		l.running += float64(s.Running)
		l.waiting += float64(s.Waiting)
		l.window += float64(s.Window)
	}
	n := float64(max(len(ss), 1))
	return podLoad{l.running / n, l.waiting / n, l.window / n}
}

func parseCaps(t *testing.T) []float64 {
	var caps []float64
	for _, f := range strings.Split(*capList, ",") {
		c, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || c <= 0 || c > 1 {
			t.Fatalf("-caps %q: want fractions in (0, 1]", *capList)
		}
		caps = append(caps, c)
	}
	return caps
}

// capRuns runs, for one seed, light alone and both tenants at each cap.
func capRuns(t *testing.T, seed uint64, caps []float64, d time.Duration) (alone TenantResult, out []capRun) {
	solo := Settings{Tenants: true}
	solo.Engine.MaxNumBatchedTokens = *capBatch // alone on the same pod
	runs := []fairRun{{name: "light alone", s: solo}}
	for _, c := range caps {
		sh := map[string]queue.Share{"heavy": {Max: c}}
		if *capLight > 0 {
			sh["light"] = queue.Share{Min: *capLight}
		}
		s := Settings{Tenants: true, SeriesEvery: 10 * time.Second, Queue: queue.Settings{Shares: sh}}
		s.Limiter.ClientQPS, s.Engine.MaxNumBatchedTokens = *capQPS, *capBatch
		if *capShare {
			s.Limiter.Shares = limiterShares(sh)
		}
		runs = append(runs, fairRun{name: fmt.Sprint(c), s: s})
	}
	runFair(t, runs, d, seed)
	for i, c := range caps {
		res := runs[i+1].res
		out = append(out, capRun{seed: seed, cap: c, heavy: tenantNamed(res, "heavy"), light: tenantNamed(res, "light"), pod: meanLoad(res.Series)})
	}
	return tenantNamed(runs[0].res, "light"), out
}

// limiterShares are the queue's shares as the fast breaker's, as
// gatekeeper's policy maps them (fairness.share_fast_breaker).
func limiterShares(q map[string]queue.Share) map[string]breaker.TenantShare {
	out := make(map[string]breaker.TenantShare, len(q))
	for name, sh := range q {
		out[name] = breaker.TenantShare{Min: sh.Min, Max: sh.Max}
	}
	return out
}

// tenantNamed is the result of the tenant named name (Result.Tenants is in
// the order of their first arrivals, which differs between seeds).
func tenantNamed(r Result, name string) TenantResult {
	for _, t := range r.Tenants {
		if t.Name == name {
			return t
		}
	}
	return TenantResult{Name: name}
}

func TestTenantCapSweep(t *testing.T) {
	if *capSeeds == "" {
		t.Skip("-cap-seeds not set")
	}
	var from, to uint64
	if _, err := fmt.Sscanf(*capSeeds, "%d-%d", &from, &to); err != nil || to < from {
		t.Fatalf("-cap-seeds %q: want from-to", *capSeeds)
	}
	caps := parseCaps(t)
	d := time.Duration(*capHours * float64(time.Hour))
	n := int(to - from + 1)
	alone := make([]TenantResult, n)
	runs := make([][]capRun, n)
	done := make(chan struct{}, n)
	for i := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			alone[i], runs[i] = capRuns(t, from+uint64(i), caps, d)
		}()
	}
	for range n {
		<-done
	}
	if *capPods {
		fmt.Print(capParts(alone, runs))
	}
	fmt.Print(capTable(alone, runs, caps))
	fmt.Printf("\nlight min_share %v, per-client qps %v (0: off), shares of the global bucket %v, max_num_batched_tokens %v (0: 8192); %v virtual per run, seeds %d–%d, H100-80G, Llama-3-8B; light %.1f QPS, heavy %.0f QPS.\n",
		*capLight, *capQPS, *capShare, *capBatch, d, from, to, fairLightQPS, 10*fairLightQPS)
}

// capTable is one row per cap: light's p99 TTFT ÷ alone (mean and worst
// seed), its slowest 1 %'s parts, and heavy's served requests and service
// against the first cap's.
func capTable(alone []TenantResult, runs [][]capRun, caps []float64) string {
	var b strings.Builder
	b.WriteString("| heavy max_share | light p99 TTFT ÷ alone, mean (worst seed) | light slowest 1 %: TTFT = queue + pod wait + prefill step(s) (+ retries) | heavy served | heavy service | pod running / waiting, mean |\n")
	b.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for j, c := range caps {
		var sum, worst float64
		var tl TTFTParts
		var hs, hs0, sv, sv0 int64
		var ld podLoad
		for i := range runs {
			r := runs[i][j]
			x := float64(r.light.TTFTP99) / float64(max(alone[i].TTFTP99, 1))
			sum, worst = sum+x, max(worst, x)
			p := r.light.Tail
			tl = TTFTParts{tl.TTFT + p.TTFT, tl.Retry + p.Retry, tl.Queue + p.Queue, tl.Pod + p.Pod, tl.Prefill + p.Prefill}
			hs, hs0, sv, sv0 = hs+r.heavy.Served, hs0+runs[i][0].heavy.Served, sv+r.heavy.Service, sv0+runs[i][0].heavy.Service
			ld = podLoad{ld.running + r.pod.running, ld.waiting + r.pod.waiting, ld.window + r.pod.window}
		}
		k := time.Duration(len(runs))
		fk := float64(len(runs))
		fmt.Fprintf(&b, "| %v | %.1f × (%.1f ×) | %s = %s + %s + %s (+ %s) | %d (%+.1f %%) | %d (%+.1f %%) | %.0f / %.0f |\n", c, sum/fk, worst,
			fmtDur(tl.TTFT/k), fmtDur(tl.Queue/k), fmtDur(tl.Pod/k), fmtDur(tl.Prefill/k), fmtDur(tl.Retry/k),
			hs, 100*(float64(hs)/float64(max(hs0, 1))-1), sv, 100*(float64(sv)/float64(max(sv0, 1))-1), ld.running/fk, ld.waiting/fk)
	}
	return b.String()
}

// capParts is one row per seed and cap: light's TTFT p50/p99, its queue,
// pod and prefill p99s, and its slowest 1 %'s mean parts.
func capParts(alone []TenantResult, runs [][]capRun) string {
	var b strings.Builder
	b.WriteString("| seed | heavy max_share | light TTFT p50 / p99 (alone) | p99 queue / pod wait / prefill | slowest 1 %: TTFT, retry, queue, pod, prefill | light 429 / refused / left queue | pod running / waiting / window, mean |\n")
	b.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for i, rs := range runs {
		for _, r := range rs {
			l, p := r.light, r.light.Tail
			fmt.Fprintf(&b, "| %d | %v | %s / %s (%s) | %s / %s / %s | %s, %s, %s, %s, %s | %d / %d / %d | %.0f / %.0f / %.0f |\n", r.seed, r.cap,
				fmtDur(l.TTFTP50), fmtDur(l.TTFTP99), fmtDur(alone[i].TTFTP99), fmtDur(l.WaitP99), fmtDur(l.PodWaitP99), fmtDur(l.PrefillP99),
				fmtDur(p.TTFT), fmtDur(p.Retry), fmtDur(p.Queue), fmtDur(p.Pod), fmtDur(p.Prefill), l.RateLimited, l.Refused, l.Left, r.pod.running, r.pod.waiting, r.pod.window)
		}
	}
	return b.String() + "\n"
}
