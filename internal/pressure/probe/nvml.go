package probe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// readNVML takes one reading of the local GPUs through a pressure.Monitor
// with gatekeeper's own nvml source (its source type is not exported): Run
// reads at once, the first report stops it, and Run shuts NVML down.
func readNVML(ctx context.Context, lib pressure.NVML) (Result, error) {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var first *pressure.State // written by OnUpdate, read after Run returned
	m, err := pressure.New(pressure.Settings{
		Upstreams: []pressure.UpstreamSettings{{Name: "probe",
			Sources: []pressure.SourceSettings{{Kind: pressure.KindNVML, Name: "nvml"}}}},
		Interval: time.Minute, // one read; its timeout is the caller's context
		NVML:     lib,
		OnUpdate: func(s pressure.State) {
			if first == nil {
				first = &s
				stop()
			}
		},
	})
	if err != nil {
		return Result{}, fmt.Errorf("probe: nvml: %w", err)
	}
	runErr := m.Run(ctx)
	if first == nil {
		if err := context.Cause(ctx); err != nil {
			return Result{}, fmt.Errorf("probe: nvml: no reading: %w", err)
		}
		return Result{}, errors.New("probe: nvml: no reading")
	}
	for _, src := range first.Sources {
		if !src.Up {
			return Result{}, fmt.Errorf("probe: %s", src.LastError)
		}
	}
	if runErr != nil {
		return Result{}, fmt.Errorf("probe: nvml: %w", runErr)
	}
	r := Result{kind: pressure.KindNVML}
	for _, u := range first.Upstreams {
		for _, g := range u.GPUs {
			for _, sig := range pressure.Signals() {
				if v, ok := g.Signals[sig]; ok {
					r.Rows = append(r.Rows, Row{Signal: sig, gpu: g.ID, uuid: g.UUID, Value: v.Value})
				}
			}
		}
	}
	return r, nil
}
