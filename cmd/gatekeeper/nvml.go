package main

import (
	"errors"
	"fmt"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

// nvmlNotCompiled is what a policy's nvml source earns in a build without
// the nvml build tag (pressure.ErrNVMLNotCompiled says the same to callers
// of package pressure).
const nvmlNotCompiled = "kind nvml is not compiled into this gatekeeper: use a build with the nvml build tag " +
	"(go build -tags nvml, which needs cgo; the image's nvml variant, docker build --build-arg VARIANT=nvml), " +
	"or read the same GPU memory through the DCGM exporter (kind: dcgm) or the allocator exporter (kind: memory_blocks)"

// unbuiltSources returns an error per source of c that this binary cannot
// read: every nvml source when nvml is false (pressure.NVMLCompiled). The
// policy is valid, so config accepts it (and -print-config shows it);
// loadRunnable refuses it, so -check, start and reload name the file, line
// and key instead of running with a source that can never answer.
func unbuiltSources(c *config.Config, nvml bool) error {
	if nvml {
		return nil
	}
	var errs []error
	check := func(path string, s config.Source) {
		if s.Kind == config.SourceNVML {
			errs = append(errs, &config.FieldError{Path: path + ".kind", Line: c.Line(path + ".kind"), Msg: nvmlNotCompiled})
		}
	}
	for i, s := range c.Pressure.Sources {
		check(fmt.Sprintf("pressure.sources[%d]", i), s)
	}
	for i, u := range c.Upstreams {
		for j, s := range u.Sources {
			check(fmt.Sprintf("upstreams[%d].sources[%d]", i, j), s)
		}
	}
	return errors.Join(errs...)
}
