package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// runCores drives each "name=url" target closed loop (the saturation
// scenario's workers) for dur per round, rounds times, the first target
// rotating each round, and writes one Markdown table: what each reached and
// its ratio to the target named nginx. With proxyfloor's cores among the
// targets it shows what an HTTP core alone allows on this machine beside
// what gatekeeper (that core and the policy) reaches (issue 38).
func runCores(w io.Writer, targets string, rounds int, dur time.Duration, workers uint64) {
	var ats []*attacker
	for _, kv := range strings.Split(targets, ",") {
		name, url, ok := strings.Cut(kv, "=")
		if !ok || name == "" || url == "" {
			fmt.Fprintf(w, "driver: bad -cores entry %q (want name=url)\n", kv)
			return
		}
		ats = append(ats, newAttacker(name, url, workers))
	}
	for _, at := range ats {
		at.run(targeter(at.url, body(false), nil), 0, time.Second, nil) // warm-up, closed loop
	}
	samples := make([]*sample, len(ats))
	for i := range samples {
		samples[i] = newSample()
	}
	for round := range rounds {
		for i := range ats {
			j := (i + round) % len(ats)
			ats[j].run(targeter(ats[j].url, body(false), nil), 0, dur, samples[j])
		}
	}
	writeCores(w, ats, samples)
}

func writeCores(w io.Writer, ats []*attacker, samples []*sample) {
	nginx := 0.0
	for i, at := range ats {
		if at.name == "nginx" {
			nginx = samples[i].rate()
		}
	}
	fmt.Fprintln(w, "| target | req/s | ÷ nginx | p50 | p99 | ok % |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: |")
	for i, at := range ats {
		s := samples[i]
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %.2f |\n", at.name, s.rate(), ratio(s.rate(), nginx),
			ms(s.q(0.5)), ms(s.q(0.99)), s.okShare())
	}
}
