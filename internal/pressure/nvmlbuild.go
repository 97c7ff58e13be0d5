package pressure

import "errors"

// ErrNVMLNotCompiled is what an nvml source reports in a build without the
// nvml build tag (NVMLCompiled is false): go-nvml needs cgo, so the default
// build, a static binary, leaves it out. The DCGM exporter and the allocator
// exporter carry the same facts over HTTP. Every build declares it, so
// callers can test for it whichever build they are in.
var ErrNVMLNotCompiled = errors.New("pressure: nvml is not compiled into this build: " +
	"build with the nvml build tag (go build -tags nvml, cgo; the image's nvml variant), " +
	"or read GPU memory through the DCGM exporter (kind: dcgm) or the allocator exporter (kind: memory_blocks)")
