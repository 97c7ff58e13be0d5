// Command driver is the load side of bench/run: it drives the upstream
// directly and through gatekeeper, nginx and HAProxy with vegeta, alternating
// the targets round by round, measures gatekeeper's refusal path and the
// memory of its queue, and prints one Markdown report.
//
// With -streams N it instead holds N paced SSE streams open through each
// target in turn (streams.go) and prints the scenario as JSON; with
// -stream-report it turns such JSON files into the report's "Open streams"
// section (streamreport.go).
//
// With -epp decisions or -epp streams it plays Envoy against gatekeeper's
// endpoint picker and its floor (bench/eppfloor) over ext_proc and prints
// the scenario as JSON (epp*.go); -epp-report turns those files into the
// "Endpoint picker" section.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

type scenario struct {
	name   string
	stream bool
	rate   int // 0: saturation
}

func main() {
	var (
		direct      = flag.String("direct", "http://127.0.0.1:18000", "upstream base URL")
		gk          = flag.String("gatekeeper", "http://127.0.0.1:18080", "gatekeeper base URL")
		nginx       = flag.String("nginx", "http://127.0.0.1:18081", "nginx base URL")
		haproxy     = flag.String("haproxy", "http://127.0.0.1:18082", "HAProxy base URL")
		rates       = flag.String("rates", "500,2000,5000", "fixed rates, req/s (non-streaming)")
		streamRates = flag.String("stream-rates", "500,2000", "fixed rates, req/s (streaming)")
		dur         = flag.Duration("dur", 3*time.Second, "length of one attack")
		rounds      = flag.Int("rounds", 2, "rounds; each runs every target once per scenario, in rotating order")
		satWorkers  = flag.Uint64("sat-workers", 64, "closed-loop workers for saturation")
		ttfbRate    = flag.Int("ttfb-rate", 200, "req/s for time to first byte of streams")
		flood       = flag.String("flood", "", "gatekeeper with a per-client limit for the refusal path (empty: skip)")
		floodPID    = flag.Int("flood-pid", 0, "its process id")
		perClient   = flag.Int("per-client-qps", 500, "its per-client qps")
		goodRate    = flag.Int("good-rate", 200, "req/s of the admitted client during the flood")
		qURL        = flag.String("queue", "", "gatekeeper with a one-slot window for the queue measurement (empty: skip)")
		qAdmin      = flag.String("queue-admin", "", "its admin base URL")
		qPID        = flag.Int("queue-pid", 0, "its process id")
		waiters     = flag.Int("waiters", 10000, "waiting requests")
		queueOnly   = flag.Bool("queue-only", false, "measure only the queue (needs -queue); print its section")
		strict      = flag.Bool("strict", false, "with -queue-only: exit 1 unless every waiter queued, no client failed and the queue drained (bench/run's smoke)")
		queueProf   = flag.String("queue-profile", "", "with the waiters queued, save the queue gatekeeper's heap and goroutine profiles here (needs server.pprof)")
		profAdmin   = flag.String("profile-admin", "", "gatekeeper admin URL with server.pprof on: profile a saturation run (empty: skip)")
		profOut     = flag.String("profile-out", "cpu.pprof", "where the CPU profile goes (allocs next to it)")
		streams     = flag.Int("streams", 0, "stream mode: hold this many streams open through each target, print JSON")
		chunks      = flag.Int("stream-chunks", 200, "stream mode: content chunks per stream")
		interval    = flag.Duration("stream-interval", 50*time.Millisecond, "stream mode: between two chunks")
		chunkBytes  = flag.Int("stream-chunk-bytes", 200, "stream mode: bytes of one content event")
		promptBytes = flag.Int("prompt-bytes", 4096, "stream mode: prompt size")
		ramp        = flag.Duration("ramp", 2*time.Second, "stream mode: the streams open evenly over this")
		pids        = flag.String("stream-pids", "", "stream mode: name=pid,… of the proxies (nginx: its master)")
		first       = flag.Int("stream-first", 0, "stream mode: index of the target measured first (direct, gatekeeper, nginx, haproxy)")
		streamRep   = flag.String("stream-report", "", "comma-separated stream-mode JSON files: print their Markdown section")
		eppOpts     = eppFlags()
		overTargets = flag.String("overload", "", "past saturation (issue 38): comma-separated name=url targets, driven open loop at -overload-rates; print a Markdown table")
		overRates   = flag.String("overload-rates", "2000,5000", "with -overload: rates, req/s")
		cores       = flag.String("cores", "", "saturation of HTTP cores (issue 38): comma-separated name=url targets, closed loop for -dur each, -rounds rounds; print a Markdown table")
		corePIDs    = flag.String("cores-pids", "", "with -cores: name=pid,… of the targets (nginx: its master) and of the bench upstream (upstream=pid): add their CPU per request")
	)
	flag.Parse()
	if *cores != "" {
		runCores(os.Stdout, *cores, parsePIDs("-cores-pids", *corePIDs), *rounds, *dur, *satWorkers)
		return
	}
	if *overTargets != "" {
		runOverload(os.Stdout, *overTargets, ints(*overRates), *dur)
		return
	}
	if o := eppOpts(); o.report != "" {
		dec, hold, err := loadEPP(strings.Split(o.report, ","))
		if err != nil {
			log.Fatal(err)
		}
		writeEPP(os.Stdout, dec, hold)
		return
	} else if o.mode != "" {
		if err := runEPP(context.Background(), os.Stdout, o); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *streamRep != "" {
		scs, err := loadStreams(strings.Split(*streamRep, ","))
		if err != nil {
			log.Fatal(err)
		}
		writeStreams(os.Stdout, scs)
		return
	}
	if *queueOnly {
		q, err := queueMemory(*qURL, *qAdmin, *qPID, *waiters, *queueProf)
		if err != nil {
			log.Printf("queue: %v", err)
		}
		(&report{queue: q}).writeQueue(os.Stdout)
		if *strict {
			if err := q.check(err); err != nil {
				log.Fatal(err)
			}
		}
		return
	}
	if *streams > 0 {
		pid := parsePIDs("-stream-pids", *pids)
		sites := []streamSite{{"direct", *direct, 0}, {"gatekeeper", *gk, pid["gatekeeper"]},
			{"nginx", *nginx, pid["nginx"]}, {"haproxy", *haproxy, pid["haproxy"]}}
		sh := streamShape{Streams: *streams, Chunks: *chunks, IntervalMS: float64(*interval) / 1e6,
			ChunkBytes: *chunkBytes, PromptBytes: *promptBytes, RampS: ramp.Seconds()}
		if err := runStreams(os.Stdout, sites, *first, sh); err != nil {
			log.Fatal(err)
		}
		return
	}
	targets := []*attacker{
		newAttacker("direct", *direct, *satWorkers),
		newAttacker("gatekeeper", *gk, *satWorkers),
		newAttacker("nginx", *nginx, *satWorkers),
		newAttacker("haproxy", *haproxy, *satWorkers),
	}
	var scenarios []scenario
	for _, r := range ints(*rates) {
		scenarios = append(scenarios, scenario{fmt.Sprintf("%d/s", r), false, r})
	}
	for _, r := range ints(*streamRates) {
		scenarios = append(scenarios, scenario{fmt.Sprintf("%d/s stream", r), true, r})
	}
	scenarios = append(scenarios, scenario{"saturation", false, 0})
	rep := &report{targets: targets, scenarios: scenarios, cells: map[string]*sample{}}
	for _, t := range targets {
		t.run(targeter(t.url, body(false), nil), 500, time.Second, nil) // warm-up
		t.run(targeter(t.url, body(true), nil), 500, time.Second, nil)
	}
	for round := range *rounds {
		for _, sc := range scenarios {
			for i := range targets {
				t := targets[(i+round)%len(targets)] // rotate who goes first
				s := rep.cell(t.name, sc.name)
				t.run(targeter(t.url, body(sc.stream), nil), sc.rate, *dur, s)
			}
		}
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1000, DisableCompression: true}}
		for i := range targets {
			t := targets[(i+round)%len(targets)]
			ttfb(context.Background(), client, t.url, *ttfbRate, *dur, rep.cell(t.name, "ttfb"))
		}
		log.Printf("round %d of %d done", round+1, *rounds)
	}
	if *flood != "" {
		rep.refusal = refuse(*flood, *floodPID, *perClient, *goodRate, *dur, *satWorkers)
		log.Printf("refusal path done")
	}
	if *qURL != "" {
		q, err := queueMemory(*qURL, *qAdmin, *qPID, *waiters, *queueProf)
		if err != nil {
			log.Printf("queue: %v", err)
		}
		rep.queue = q
		log.Printf("queue done")
	}
	if *profAdmin != "" {
		if err := profile(targets[1], *profAdmin, *profOut, *dur); err != nil {
			log.Printf("profile: %v", err)
		}
	}
	rep.write(os.Stdout)
}

// profile takes a CPU profile of gatekeeper while it is driven to
// saturation, then its allocation profile.
func profile(gk *attacker, admin, out string, dur time.Duration) error {
	var wg sync.WaitGroup
	wg.Go(func() { gk.run(targeter(gk.url, body(false), nil), 0, dur+time.Second, newSample()) })
	defer wg.Wait()
	secs := int(dur.Seconds())
	if err := fetch(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", admin, secs), out); err != nil {
		return err
	}
	return fetch(admin+"/debug/pprof/allocs", strings.TrimSuffix(out, ".pprof")+".allocs.pprof")
}

func fetch(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("driver: GET %s = %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func ints(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			log.Fatalf("driver: bad rate %q", f)
		}
		out = append(out, n)
	}
	return out
}

// parsePIDs reads a flag's "name=pid,…" list; it exits on a bad entry.
func parsePIDs(flagName, list string) map[string]int {
	pid := map[string]int{}
	for _, kv := range strings.Split(list, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				log.Fatalf("driver: bad %s entry %q", flagName, kv)
			}
			pid[k] = n
		}
	}
	return pid
}
