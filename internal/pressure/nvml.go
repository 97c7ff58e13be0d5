//go:build nvml

package pressure

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVMLCompiled reports whether this build reads NVML. It is true in a build
// with the nvml build tag (which needs cgo: go-nvml loads the driver's
// library through it) and false in the default build, where an nvml source
// fails every read with ErrNVMLNotCompiled (nvml_stub.go).
const NVMLCompiled = true

// NVML is the part of go-nvml's nvml.Interface the nvml source calls.
// nvml.New() satisfies it, and so does go-nvml's pkg/nvml/mock.Interface.
// Of each nvml.Device the source calls only GetUUID, GetName,
// GetMemoryInfo_v2 and GetMemoryInfo. The type exists in this form only
// with the nvml build tag; without it nothing implements NVML.
type NVML interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(index int) (nvml.Device, nvml.Return)
	ErrorString(r nvml.Return) string
}

// symbolLookup is what the real library offers to check that a driver
// exports a function before it is called: calling a symbol the driver lacks
// crashes the process, it does not return an error.
type symbolLookup interface {
	LookupSymbol(name string) error
}

// nvmlInitRetry is how long after a failed Init the source tries again.
const nvmlInitRetry = 30 * time.Second

// nvmlSource reads device memory of every GPU on the node. It is used by
// one goroutine at a time (the Monitor's), so it needs no lock.
type nvmlSource struct {
	name string
	lib  NVML
	now  func() time.Time

	inited    bool
	noV2      bool      // the driver lacks GetMemoryInfo_v2: use GetMemoryInfo
	initErr   error     // the latest Init failure
	nextInit  time.Time // no Init attempt before this
	initTried bool
}

// newNVML is the nvml source the Monitor builds: over lib, or over the
// driver's library (nvml.New(), loaded at the first read) when lib is nil.
func newNVML(name string, lib NVML, now func() time.Time) Source {
	if lib == nil {
		lib = nvml.New()
	}
	return newNVMLSource(name, lib, now)
}

func newNVMLSource(name string, lib NVML, now func() time.Time) *nvmlSource {
	return &nvmlSource{name: name, lib: lib, now: now}
}

func (s *nvmlSource) Name() string { return s.name }

// Read initialises NVML on first use. While Init fails the source reports
// NVML's error and makes no other call, retrying Init at most every 30s;
// every device call is gated on a successful Init. Any device error fails
// the whole read (the Monitor keeps the last good one).
func (s *nvmlSource) Read(ctx context.Context) (Reading, error) {
	if err := s.init(); err != nil {
		return Reading{}, err
	}
	n, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return Reading{}, s.errorf("device count", ret)
	}
	rd := Reading{GPUs: make([]GPUReading, 0, n)}
	for i := range n {
		if err := ctx.Err(); err != nil {
			return Reading{}, fmt.Errorf("pressure: nvml: %w", err)
		}
		g, err := s.readDevice(i)
		if err != nil {
			return Reading{}, err
		}
		rd.GPUs = append(rd.GPUs, g)
	}
	return rd, nil
}

// init calls Init once, or again after nvmlInitRetry when it failed.
func (s *nvmlSource) init() error {
	if s.inited {
		return nil
	}
	now := s.now()
	if s.initTried && now.Before(s.nextInit) {
		return s.initErr
	}
	s.initTried = true
	if ret := s.lib.Init(); ret != nvml.SUCCESS {
		s.initErr = s.errorf("init", ret)
		s.nextInit = now.Add(nvmlInitRetry)
		return s.initErr
	}
	s.inited, s.initErr = true, nil
	if l, ok := s.lib.(symbolLookup); ok {
		s.noV2 = l.LookupSymbol("nvmlDeviceGetMemoryInfo_v2") != nil
	}
	return nil
}

// readDevice reads GPU i. Only called after a successful Init.
func (s *nvmlSource) readDevice(i int) (GPUReading, error) {
	d, ret := s.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return GPUReading{}, s.errorf("device "+strconv.Itoa(i), ret)
	}
	g := GPUReading{ID: strconv.Itoa(i), Values: map[Signal]float64{}}
	if uuid, ret := d.GetUUID(); ret == nvml.SUCCESS {
		g.UUID = uuid
	}
	if name, ret := d.GetName(); ret == nvml.SUCCESS {
		g.Name = name
	}
	total, free, err := s.memory(d, i)
	if err != nil {
		return GPUReading{}, err
	}
	if total > 0 {
		// (total − free) ÷ total: _v2's Used leaves out the driver's reserved
		// share, which is no more available than what is used.
		g.Values[MemoryUsed] = float64(total-min(free, total)) / float64(total)
	}
	return g, nil
}

// memory returns total and free bytes, from GetMemoryInfo_v2 unless the
// driver lacks it, then from GetMemoryInfo (remembered for later reads).
func (s *nvmlSource) memory(d nvml.Device, i int) (total, free uint64, err error) {
	if !s.noV2 {
		m, ret := d.GetMemoryInfo_v2()
		switch ret {
		case nvml.SUCCESS:
			return m.Total, m.Free, nil
		case nvml.ERROR_FUNCTION_NOT_FOUND, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_ARGUMENT_VERSION_MISMATCH:
			s.noV2 = true
		default:
			return 0, 0, s.errorf("device "+strconv.Itoa(i)+" memory", ret)
		}
	}
	m, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return 0, 0, s.errorf("device "+strconv.Itoa(i)+" memory", ret)
	}
	return m.Total, m.Free, nil
}

// Close shuts NVML down if Init succeeded.
func (s *nvmlSource) Close() error {
	if !s.inited {
		return nil
	}
	s.inited = false
	if ret := s.lib.Shutdown(); ret != nvml.SUCCESS {
		return s.errorf("shutdown", ret)
	}
	return nil
}

// errorf builds an error carrying NVML's own error string.
func (s *nvmlSource) errorf(op string, ret nvml.Return) error {
	return fmt.Errorf("pressure: nvml %s: %s", op, s.lib.ErrorString(ret))
}
