package main

import (
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"
)

// runCores drives each "name=url" target closed loop (the saturation
// scenario's workers) for dur per round, rounds times, the first target
// rotating each round, and writes one Markdown table: what each reached and
// its ratio to the target named nginx. With proxyfloor's cores among the
// targets it shows what an HTTP core alone allows on this machine beside
// what gatekeeper (that core and the policy) reaches (issue 38).
//
// pids names the process of each target (nginx: its master) and of the
// bench upstream ("upstream"); for those it also counts the CPU each
// request costs, from /proc, while that target alone is driven: the
// proxy's own, and the driver's (getrusage) plus the upstream's. Every
// target shares the machine with the driver and the upstream, so a
// throughput ratio is the ratio of all three processes' costs; these
// columns say how much of a request's cost is the proxy's.
func runCores(w io.Writer, targets string, pids map[string]int, rounds int, dur time.Duration, workers uint64) {
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
	costs := make([]coreCost, len(ats))
	for i := range samples {
		samples[i] = newSample()
	}
	for round := range rounds {
		for i := range ats {
			j := (i + round) % len(ats)
			m := startCPU(pids[ats[j].name], pids["upstream"])
			ats[j].run(targeter(ats[j].url, body(false), nil), 0, dur, samples[j])
			costs[j].add(m.stop())
		}
	}
	writeCores(w, ats, samples, costs)
}

// coreCost is the CPU seconds spent while one target was driven: by its
// proxy processes, and by the driver and the upstream together; known says
// which were measured (a process id given and /proc readable every time).
type coreCost struct {
	proxy, rest           float64
	proxyKnown, restKnown bool
	rounds                int
}

func (c *coreCost) add(d coreCost) {
	if c.rounds == 0 {
		c.proxyKnown, c.restKnown = d.proxyKnown, d.restKnown
	}
	c.rounds++
	c.proxy += d.proxy
	c.rest += d.rest
	c.proxyKnown = c.proxyKnown && d.proxyKnown
	c.restKnown = c.restKnown && d.restKnown
}

// cpuMeter is a coreCost being measured: the CPU counters at its start.
type cpuMeter struct {
	proxyPIDs            []int
	upstream             int
	proxy0, up0, driver0 float64
	proxyOK, upOK        bool
}

func startCPU(proxyPID, upstreamPID int) *cpuMeter {
	m := &cpuMeter{upstream: upstreamPID}
	if proxyPID > 0 {
		m.proxyPIDs = servers(proxyPID)
		v, err := sumCPU(m.proxyPIDs)
		m.proxy0, m.proxyOK = v, err == nil
	}
	if upstreamPID > 0 {
		v, err := cpuSeconds(upstreamPID)
		m.up0, m.upOK = v, err == nil
	}
	m.driver0 = selfCPU()
	return m
}

func (m *cpuMeter) stop() coreCost {
	var c coreCost
	if m.proxyOK {
		v, err := sumCPU(m.proxyPIDs)
		c.proxy, c.proxyKnown = v-m.proxy0, err == nil
	}
	if m.upOK {
		v, err := cpuSeconds(m.upstream)
		c.rest, c.restKnown = v-m.up0+selfCPU()-m.driver0, err == nil
	}
	return c
}

// selfCPU is the driver's own user plus system CPU seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func writeCores(w io.Writer, ats []*attacker, samples []*sample, costs []coreCost) {
	nginx, nginxCPU := 0.0, 0.0
	for i, at := range ats {
		if at.name == "nginx" {
			nginx = samples[i].rate()
			nginxCPU = costs[i].perRequest(samples[i], true)
		}
	}
	fmt.Fprintln(w, "| target | req/s | ÷ nginx | proxy CPU µs/req | ÷ nginx | driver + upstream µs/req | p50 | p99 | ok % |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for i, at := range ats {
		s, c := samples[i], costs[i]
		proxy, rest := c.perRequest(s, true), c.perRequest(s, false)
		cpuRatio := "–"
		if proxy > 0 {
			cpuRatio = ratio(proxy, nginxCPU)
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %s | %s | %s | %.2f |\n", at.name, s.rate(), ratio(s.rate(), nginx),
			micros(proxy), cpuRatio, micros(rest), ms(s.q(0.5)), ms(s.q(0.99)), s.okShare())
	}
}

// perRequest is the proxy's (or the driver's and upstream's) CPU per request
// sent in µs, 0 when it was not measured.
func (c coreCost) perRequest(s *sample, proxy bool) float64 {
	v, known := c.rest, c.restKnown
	if proxy {
		v, known = c.proxy, c.proxyKnown
	}
	if !known || c.rounds == 0 || s.sent == 0 {
		return 0
	}
	return v * 1e6 / float64(s.sent)
}

// micros renders µs, "–" for 0 (not measured).
func micros(v float64) string {
	if v <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", v)
}
