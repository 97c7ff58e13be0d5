package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"
)

// eppOptions are the flags of the endpoint-picker scenarios (-epp). The
// first target is gatekeeper, the second the floor (bench/eppfloor).
type eppOptions struct {
	mode      string // "decisions" or "streams"
	targets   []eppTarget
	conns     int
	bodyBytes int
	rate      int
	dur       time.Duration
	warmup    time.Duration
	slices    int
	streams   int
	ramp      time.Duration
	profOut   string
	report    string // comma-separated JSON files: print the section
}

// eppFlags registers the -epp flags on the default flag set; the returned
// function, called after flag.Parse, gives their values.
func eppFlags() func() eppOptions {
	var (
		mode      = flag.String("epp", "", "endpoint-picker mode: decisions or streams; print JSON")
		gk        = flag.String("epp-gatekeeper", "127.0.0.1:18402", "gatekeeper's ext_proc address")
		gkAdmin   = flag.String("epp-gatekeeper-admin", "http://127.0.0.1:18490", "its admin base URL")
		gkPID     = flag.Int("epp-gatekeeper-pid", 0, "its process id")
		fl        = flag.String("epp-floor", "127.0.0.1:18412", "the floor's ext_proc address (bench/eppfloor)")
		flAdmin   = flag.String("epp-floor-admin", "http://127.0.0.1:18413", "its admin base URL")
		flPID     = flag.Int("epp-floor-pid", 0, "its process id")
		conns     = flag.Int("epp-conns", 4, "HTTP/2 connections per target, as Envoy's workers; streams go over them in turn")
		bodyBytes = flag.Int("epp-body-bytes", 1024, "size of the chat request body")
		rate      = flag.Int("epp-rate", 2000, "decisions: exchanges per second, open loop")
		dur       = flag.Duration("epp-dur", 10*time.Second, "decisions: measured time per target")
		warmup    = flag.Duration("epp-warmup", time.Second, "decisions: each target first, at the same rate, not counted")
		slices    = flag.Int("epp-slices", 10, "decisions: -epp-dur per target is measured in this many slices, the targets alternating")
		streams   = flag.Int("epp-streams", 10000, "streams: held at once")
		ramp      = flag.Duration("epp-ramp", 2*time.Second, "streams: they open evenly over this")
		profOut   = flag.String("epp-profile", "", "decisions: afterwards, CPU-profile gatekeeper at the same rate into this file (allocs next to it)")
		report    = flag.String("epp-report", "", "comma-separated JSON files of both modes: print their Markdown section")
	)
	return func() eppOptions {
		return eppOptions{mode: *mode, conns: *conns, bodyBytes: *bodyBytes, rate: *rate, dur: *dur, warmup: *warmup,
			slices: *slices, streams: *streams, ramp: *ramp, profOut: *profOut, report: *report,
			targets: []eppTarget{{"gatekeeper", *gk, *gkAdmin, *gkPID}, {"floor", *fl, *flAdmin, *flPID}}}
	}
}

// runEPP runs the scenario o.mode names and writes it to w as JSON.
func runEPP(ctx context.Context, w io.Writer, o eppOptions) error {
	var v any
	var err error
	switch o.mode {
	case "decisions":
		if o.rate <= 0 || o.slices <= 0 {
			return fmt.Errorf("driver: -epp-rate and -epp-slices must be above 0, got %d and %d", o.rate, o.slices)
		}
		v, err = runDecisions(ctx, o)
	case "streams":
		v, err = runHold(ctx, o)
	default:
		return fmt.Errorf("driver: -epp %q: want decisions or streams", o.mode)
	}
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(v)
}
