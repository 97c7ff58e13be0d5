package pressure

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
)

// DCGM exporter frame-buffer fields, in MiB.
const (
	dcgmUsed     = "DCGM_FI_DEV_FB_USED"
	dcgmFree     = "DCGM_FI_DEV_FB_FREE"
	dcgmReserved = "DCGM_FI_DEV_FB_RESERVED"
)

// ParseDCGMMetrics reads a DCGM exporter's Prometheus text /metrics and
// returns one GPUReading per gpu label with MemoryUsed = (total − free) ÷
// total, where total = FB_USED + FB_FREE + FB_RESERVED (FB_RESERVED, the
// driver's own share, counts as unavailable; it is 0 when not exported).
// This equals NVML's (total − free) ÷ total, so nvml and dcgm agree. Series
// sharing a gpu label (MIG instances) are summed. A GPU without both FB_USED
// and FB_FREE yields no MemoryUsed. UUID, modelName and Hostname (or
// hostname) are kept. A body without any FB series is ErrNoMetrics.
func ParseDCGMMetrics(data []byte) (Reading, error) {
	fams, err := parseFamilies(data, dcgmUsed, dcgmFree, dcgmReserved)
	if err != nil {
		return Reading{}, err
	}
	type acc struct {
		g                    GPUReading
		used, free, reserved float64
		hasUsed, hasFree     bool
	}
	gpus := map[string]*acc{}
	fold := func(name string, add func(a *acc, v float64)) {
		for _, m := range fams[name].GetMetric() {
			v, ok := sampleValue(m)
			id := label(m, "gpu")
			if !ok || id == "" || v < 0 {
				continue
			}
			a := gpus[id]
			if a == nil {
				a = &acc{g: GPUReading{ID: id, UUID: label(m, "UUID"),
					Name: label(m, "modelName"), host: label(m, "Hostname", "hostname")}}
				gpus[id] = a
			}
			add(a, v)
		}
	}
	fold(dcgmUsed, func(a *acc, v float64) { a.used += v; a.hasUsed = true })
	fold(dcgmFree, func(a *acc, v float64) { a.free += v; a.hasFree = true })
	fold(dcgmReserved, func(a *acc, v float64) { a.reserved += v })
	if len(gpus) == 0 {
		return Reading{}, fmt.Errorf("pressure: dcgm: %w", ErrNoMetrics)
	}
	var rd Reading
	for _, a := range gpus {
		a.g.Values = map[Signal]float64{}
		if total := a.used + a.free + a.reserved; a.hasUsed && a.hasFree && total > 0 {
			a.g.Values[MemoryUsed] = (total - a.free) / total
		}
		rd.GPUs = append(rd.GPUs, a.g)
	}
	sortGPUs(rd.GPUs)
	return rd, nil
}

// sortGPUs orders GPUs by numeric ID, then by ID text.
func sortGPUs(gs []GPUReading) {
	slices.SortFunc(gs, func(a, b GPUReading) int { return compareIDs(a.ID, b.ID) })
}

// compareIDs orders numeric GPU IDs by number, before any other IDs, which
// sort as text.
func compareIDs(a, b string) int {
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	switch {
	case errA == nil && errB == nil:
		return cmp.Or(cmp.Compare(x, y), cmp.Compare(a, b))
	case errA == nil:
		return -1
	case errB == nil:
		return 1
	}
	return cmp.Compare(a, b)
}

// newDCGMSource reads a DCGM exporter.
func newDCGMSource(name, url string, c *http.Client) *httpSource {
	return &httpSource{name: name, parse: ParseDCGMMetrics, get: getter(c, url, KindDCGM)}
}
