//go:build !nvml

package pressure

import (
	"context"
	"time"
)

// NVMLCompiled reports whether this build reads NVML. It is false in the
// default build, which needs no cgo and so can be a static binary: go-nvml
// is compiled in only with the nvml build tag (nvml.go). Here an nvml
// source fails every read with ErrNVMLNotCompiled.
const NVMLCompiled = false

// NVML stands for go-nvml's library, which this build does not have: only a
// build with the nvml build tag declares the methods the nvml source calls.
// Nothing outside this package implements this form, so Settings.NVML stays
// nil.
type NVML interface {
	nvmlNotCompiled()
}

// nvmlStub is the nvml source of a build without the nvml build tag: every
// read fails with ErrNVMLNotCompiled, so the source is down and its state
// (/admin/state, gatekeeper_source_up) says why.
type nvmlStub struct{ name string }

// newNVML is the nvml source the Monitor builds. The library and clock are
// those of a build with the nvml tag; this one has no use for them.
func newNVML(name string, _ NVML, _ func() time.Time) Source { return nvmlStub{name: name} }

func (s nvmlStub) Name() string { return s.name }

// Read fails: this build cannot read NVML.
func (nvmlStub) Read(context.Context) (Reading, error) { return Reading{}, ErrNVMLNotCompiled }
