package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim/traffic"
)

// overloadCell is one target at one open-loop rate past (or near)
// saturation (issue 38): what was served and how fast, and what was refused
// with 503 and how fast, apart.
type overloadCell struct {
	target  string
	rate    int
	sent    int
	served  []time.Duration // 2xx
	refused []time.Duration // 503 with Retry-After and X-Gatekeeper-Reason: gateway_overloaded
	other   int             // anything else: other statuses, transport errors, timeouts
	dur     time.Duration
}

// runOverload drives each "name=url" target open loop at each rate for dur
// (after a 1 s warm-up at the first rate), the targets in rotating order,
// and writes one Markdown table.
func runOverload(w io.Writer, targets string, rates []int, dur time.Duration) {
	var ats []*attacker
	for _, kv := range strings.Split(targets, ",") {
		name, url, _ := strings.Cut(kv, "=")
		ats = append(ats, newAttacker(name, url, 64))
	}
	for _, at := range ats {
		at.run(targeter(at.url, body(false), nil), 500, time.Second, nil)
	}
	var cells []*overloadCell
	for i, rate := range rates {
		for j := range ats {
			at := ats[(i+j)%len(ats)]
			c := &overloadCell{target: at.name, rate: rate}
			c.attack(at, dur)
			cells = append(cells, c)
		}
	}
	writeOverload(w, cells)
}

// attack runs one open-loop attack and sorts its answers.
func (c *overloadCell) attack(at *attacker, dur time.Duration) {
	a, pacer := at.vegeta(c.rate)
	start := time.Now()
	for r := range a.Attack(targeter(at.url, body(false), nil), pacer, dur, at.name) {
		c.sent++
		switch {
		case r.Error == "" && r.Code >= 200 && r.Code < 300:
			c.served = append(c.served, r.Latency)
		case r.Code == http.StatusServiceUnavailable && r.Headers.Get("Retry-After") != "" &&
			r.Headers.Get("X-Gatekeeper-Reason") == "gateway_overloaded":
			c.refused = append(c.refused, r.Latency)
		default:
			c.other++
		}
	}
	c.dur = time.Since(start)
}

func writeOverload(w io.Writer, cells []*overloadCell) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/1e6) }
	pct := func(n, of int) string {
		if of == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f", 100*float64(n)/float64(of))
	}
	fmt.Fprintln(w, "| rate | target | sent | served % | served/s | served p50 | served p99 | refused % | refused p50 | refused p99 | refused max | other |")
	fmt.Fprintln(w, "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, c := range cells {
		q := func(l []time.Duration, q float64) string {
			if len(l) == 0 {
				return "–"
			}
			return ms(traffic.Quantile(l, q))
		}
		fmt.Fprintf(w, "| %d/s | %s | %d | %s | %.0f | %s | %s | %s | %s | %s | %s | %d |\n", c.rate, c.target, c.sent,
			pct(len(c.served), c.sent), float64(len(c.served))/c.dur.Seconds(), q(c.served, 0.5), q(c.served, 0.99),
			pct(len(c.refused), c.sent), q(c.refused, 0.5), q(c.refused, 0.99), q(c.refused, 1), c.other)
	}
}
