package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Issue targets of the endpoint picker's performance.
const (
	eppTargetRate    = 2000 // decisions per second
	eppTargetP99US   = 1000 // decision latency p99 at that rate
	eppTargetStreams = 10000
)

// loadEPP reads the JSON files -epp wrote, each a decisions or a streams
// scenario.
func loadEPP(paths []string) (*decisionScenario, *holdScenario, error) {
	var dec *decisionScenario
	var hold *holdScenario
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, err
		}
		var probe struct {
			Streams int `json:"streams"`
		}
		if err := json.Unmarshal(b, &probe); err != nil {
			return nil, nil, fmt.Errorf("driver: %s: %w", p, err)
		}
		if probe.Streams > 0 {
			hold = &holdScenario{}
			err = json.Unmarshal(b, hold)
		} else {
			dec = &decisionScenario{}
			err = json.Unmarshal(b, dec)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("driver: %s: %w", p, err)
		}
	}
	return dec, hold, nil
}

// usMS formats microseconds as milliseconds.
func usMS(us float64) string { return fmt.Sprintf("%.3f", us/1e3) }

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// writeEPP renders the "Endpoint picker" section's body (bench/run writes
// its heading and markers).
func writeEPP(w io.Writer, dec *decisionScenario, hold *holdScenario) {
	fmt.Fprintln(w, "gatekeeper as the endpoint picker beside the floor, `bench/eppfloor`: gatekeeper's own ext_proc server")
	fmt.Fprintln(w, "(`epp.NewServer`) over a Decider that always picks one endpoint and only counts its slots, so gatekeeper ÷ floor")
	fmt.Fprintln(w, "is the decision core and policy. Each runs as its own process. The driver plays Envoy with go-control-plane's ext_proc types over")
	fmt.Fprintln(w, "TCP loopback gRPC: a few HTTP/2 connections per target, one ext_proc stream per request multiplexed over them")
	fmt.Fprintln(w, "in turn; each stream sends the request headers (POST /v1/chat/completions), the body in one chunk with")
	fmt.Fprintln(w, "end_of_stream, reads the pick (the request headers' answer setting `x-gateway-destination-endpoint`) and the")
	fmt.Fprintln(w, "body's echo, sends the response headers (`:status 200`) with end_of_stream, reads their answer, and closes.")
	fmt.Fprintln(w)
	if dec != nil {
		writeEPPDecisions(w, dec)
	}
	if hold != nil {
		writeEPPHold(w, hold)
	}
	writeEPPRatios(w, dec, hold)
	writeEPPTargets(w, dec, hold)
}

func writeEPPDecisions(w io.Writer, sc *decisionScenario) {
	fmt.Fprintf(w, "#### Decisions at %d/s, open loop\n\n", sc.Rate)
	fmt.Fprintf(w, "%d connections per target; a %d-byte chat body; each target first warmed up for %.0f s at the same rate (not\n",
		sc.Conns, sc.BodyBytes, sc.WarmupS)
	fmt.Fprintf(w, "counted), then measured for %.0f s in %d slices, the targets alternating slice by slice (the first rotating), so\n", sc.DurS, sc.Slices)
	fmt.Fprintln(w, "that load from outside the bench falls on both alike. Exchanges leave on a fixed schedule, each on its own")
	fmt.Fprintln(w, "goroutine, whether or not the ones before have ended. Decision latency: from sending the body's last chunk to")
	fmt.Fprintln(w, "receiving the pick; exact order statistics over every slice; the slices' own p99 as least / median / most.")
	fmt.Fprintln(w, "Achieved: whole exchanges completed per second measured. CPU: the picker process's utime + stime per exchange")
	fmt.Fprintln(w, "(`/proc/PID/stat`); the driver's own beside it (Envoy's side, on the same CPUs). Send lag: how late the driver")
	fmt.Fprintln(w, "sent against its schedule.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | decisions | errors | achieved/s | p50 (ms) | p90 | p99 | p99.9 | max | slice p99 least / median / most | CPU µs per exchange | driver CPU µs | send lag p99 (ms) | lag max |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
	for _, t := range sc.Targets {
		sp := slices.Clone(t.SliceP99US)
		slices.Sort(sp)
		spread := "–"
		if len(sp) > 0 {
			spread = usMS(sp[0]) + " / " + usMS(sp[(len(sp)-1)/2]) + " / " + usMS(sp[len(sp)-1])
		}
		fmt.Fprintf(w, "| %s | %d | %d | %.0f | %s | %s | %s | %s | %s | %s | %s | %.0f | %s | %s |\n", t.Name, t.Sent, t.Errors, t.Achieved,
			usMS(t.P50US), usMS(t.P90US), usMS(t.P99US), usMS(t.P999US), usMS(t.MaxUS), spread, num(t.CPUUS, 0),
			t.DriverCPUUS, usMS(t.LagP99US), usMS(t.LagMaxUS))
	}
	for _, t := range sc.Targets {
		if t.Errors > 0 {
			fmt.Fprintf(w, "\n%s errors: %s; first: `%s`\n", t.Name, tally(t.ErrWhy), t.ErrExample)
		}
	}
	fmt.Fprintln(w)
}

func writeEPPHold(w io.Writer, sc *holdScenario) {
	fmt.Fprintf(w, "#### %d streams held at once\n\n", sc.Streams)
	fmt.Fprintf(w, "%d streams open evenly over %.1f s across %d connections (a stream is not a\n", sc.Streams, sc.RampS, sc.Conns)
	fmt.Fprintln(w, "connection: the picker holds a few descriptors); each takes its pick and the body's echo, then holds it (no")
	fmt.Fprintln(w, "response yet). Once all hold, the picker's own in-flight count (`/admin/state`, the upstreams' `inflight`")
	fmt.Fprintln(w, "summed) and its memory are read; then every stream sends its response headers with end_of_stream, and the")
	fmt.Fprintln(w, "in-flight count must return to 0. Memory: VmRSS (`/proc/PID/status`) with all held less before them, per held")
	fmt.Fprintln(w, "stream; heap and stacks in use and goroutines from the picker's `/metrics`. Lost: a stream that errored")
	fmt.Fprintln(w, "anywhere, or never got a pick. Time to open all: from the first stream's start to the last pick; pick p50/p99:")
	fmt.Fprintln(w, "the decision latency of the streams as they opened, the held ones piling up.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | held | lost | in flight, held | after the ends | time to open all (s) | pick p50 (ms) | pick p99 | to end all (s) | RSS before (MiB) | RSS held (MiB) | KiB per stream | heap KiB/stream | stack KiB/stream | goroutines/stream |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, t := range sc.Targets {
		per := func(v [2]float64, unit float64) string {
			if t.Held == 0 {
				return "–"
			}
			return fmt.Sprintf("%.1f", (v[1]-v[0])/unit/float64(t.Held))
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %.2f | %s | %s | %.2f | %.1f | %.1f | %s | %s | %s | %s |\n", t.Name, t.Held, t.Lost, t.Inflight, t.After,
			t.OpenS, usMS(t.PickP50US), usMS(t.PickP99US), t.EndS, float64(t.RSSKB[0])/1024, float64(t.RSSKB[1])/1024, num(t.kibPerStream(), 1),
			per(t.Heap, 1024), per(t.Stack, 1024), per(t.Gor, 1))
	}
	for _, t := range sc.Targets {
		if t.Lost > 0 {
			fmt.Fprintf(w, "\n%s lost: %s; first: `%s`\n", t.Name, tally(t.LostWhy), t.Example)
		}
		if !t.AfterOK {
			fmt.Fprintf(w, "\n%s: in flight did not return to 0 within 20 s of the ends (%d left).\n", t.Name, t.After)
		}
	}
	fmt.Fprintln(w)
}

func writeEPPRatios(w io.Writer, dec *decisionScenario, hold *holdScenario) {
	fmt.Fprintln(w, "#### gatekeeper ÷ floor, measured side by side in this run")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| measure | gatekeeper | floor | gatekeeper ÷ floor |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: |")
	if dec != nil && len(dec.Targets) == 2 {
		g, f := dec.Targets[0], dec.Targets[1]
		fmt.Fprintf(w, "| decision p50 (ms) at %d/s | %s | %s | %s |\n", dec.Rate, usMS(g.P50US), usMS(f.P50US), ratio(g.P50US, f.P50US))
		fmt.Fprintf(w, "| decision p99 (ms) at %d/s | %s | %s | %s |\n", dec.Rate, usMS(g.P99US), usMS(f.P99US), ratio(g.P99US, f.P99US))
		fmt.Fprintf(w, "| CPU µs per exchange | %s | %s | %s |\n", num(g.CPUUS, 0), num(f.CPUUS, 0), ratio(g.CPUUS, f.CPUUS))
	}
	if hold != nil && len(hold.Targets) == 2 {
		g, f := hold.Targets[0], hold.Targets[1]
		fmt.Fprintf(w, "| KiB RSS per held stream (%d) | %s | %s | %s |\n", hold.Streams, num(g.kibPerStream(), 1), num(f.kibPerStream(), 1),
			ratio(g.kibPerStream(), f.kibPerStream()))
	}
	fmt.Fprintln(w)
}

func writeEPPTargets(w io.Writer, dec *decisionScenario, hold *holdScenario) {
	fmt.Fprintln(w, "#### Against the issue's targets (gatekeeper)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | figure | met |")
	fmt.Fprintln(w, "| --- | --- | --- |")
	if dec != nil && len(dec.Targets) > 0 {
		g := dec.Targets[0]
		fig := fmt.Sprintf("p99 %s ms at %d/s (achieved %.0f/s, %d errors)", usMS(g.P99US), dec.Rate, g.Achieved, g.Errors)
		if len(dec.Targets) > 1 {
			fig += fmt.Sprintf("; the floor beside it: p99 %s ms", usMS(dec.Targets[1].P99US))
		}
		met := "not measured at 2,000/s"
		if dec.Rate >= eppTargetRate {
			met = yesNo(g.P99US <= eppTargetP99US && g.Errors == 0 && g.Achieved >= 0.98*float64(dec.Rate))
		}
		fmt.Fprintf(w, "| decision latency p99 ≤ 1 ms at 2,000 decisions/s | %s | %s |\n", fig, met)
	}
	if hold != nil && len(hold.Targets) > 0 {
		g := hold.Targets[0]
		fig := fmt.Sprintf("%d of %d held, %d lost, picker's in flight %d, back to %d after", g.Held, hold.Streams, g.Lost, g.Inflight, g.After)
		met := "not measured at 10,000"
		if hold.Streams >= eppTargetStreams {
			met = yesNo(g.Held == hold.Streams && g.Lost == 0 && g.Inflight == hold.Streams && g.AfterOK)
		}
		fmt.Fprintf(w, "| 10,000 concurrent ext_proc streams held, none lost | %s | %s |\n", fig, met)
	}
}

// tally lists a reason → count map, the most frequent first.
func tally(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
