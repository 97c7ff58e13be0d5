//go:build nvml

package pressure

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// fakeDevice is a mock.Device with fixed memory. v2 is the _v2 answer's
// return code; SUCCESS gives a v2 reading.
func fakeDevice(uuid string, total, free uint64, v2 nvml.Return) *mock.Device {
	return &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetNameFunc: func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS },
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			if v2 != nvml.SUCCESS {
				return nvml.Memory_v2{}, v2
			}
			return nvml.Memory_v2{Total: total, Free: free, Reserved: total / 100, Used: total - free - total/100}, nvml.SUCCESS
		},
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: total, Free: free, Used: total - free}, nvml.SUCCESS
		},
	}
}

// fakeNVML is a mock.Interface over devs whose Init returns initRet. Calls
// left nil in the mock panic, so a device call after a failed Init fails
// the test.
func fakeNVML(initRet nvml.Return, devs ...*mock.Device) *mock.Interface {
	lib := &mock.Interface{
		InitFunc:     func() nvml.Return { return initRet },
		ShutdownFunc: func() nvml.Return { return nvml.SUCCESS },
		ErrorStringFunc: func(r nvml.Return) string {
			return map[nvml.Return]string{
				nvml.ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
				nvml.ERROR_GPU_IS_LOST:       "GPU is lost",
			}[r]
		},
	}
	if initRet == nvml.SUCCESS {
		lib.DeviceGetCountFunc = func() (int, nvml.Return) { return len(devs), nvml.SUCCESS }
		lib.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) { return devs[i], nvml.SUCCESS }
	}
	return lib
}

// noV2Library is a library whose driver lacks nvmlDeviceGetMemoryInfo_v2,
// as the real library reports through LookupSymbol.
type noV2Library struct{ *mock.Interface }

func (noV2Library) LookupSymbol(name string) error {
	if name == "nvmlDeviceGetMemoryInfo_v2" {
		return errors.New("undefined symbol")
	}
	return nil
}

func TestNVMLSourceRead(t *testing.T) {
	t.Parallel()
	const gib = 1 << 30
	tests := []struct {
		name string
		lib  func() (NVML, *mock.Device)
		want []GPUReading
		// v2Calls is how often the returned device's GetMemoryInfo_v2 runs
		// over two reads.
		v2Calls int
	}{
		{"v2", func() (NVML, *mock.Device) {
			d := fakeDevice("GPU-a", 80*gib, 8*gib, nvml.SUCCESS)
			return fakeNVML(nvml.SUCCESS, d, fakeDevice("GPU-b", 80*gib, 40*gib, nvml.SUCCESS)), d
		}, []GPUReading{
			{ID: "0", UUID: "GPU-a", Name: "NVIDIA H100 80GB HBM3", Values: sv{MemoryUsed: 0.9}},
			{ID: "1", UUID: "GPU-b", Name: "NVIDIA H100 80GB HBM3", Values: sv{MemoryUsed: 0.5}},
		}, 2},
		{"driver without _v2: function not found", func() (NVML, *mock.Device) {
			d := fakeDevice("GPU-a", 80*gib, 20*gib, nvml.ERROR_FUNCTION_NOT_FOUND)
			return fakeNVML(nvml.SUCCESS, d), d
		}, []GPUReading{{ID: "0", UUID: "GPU-a", Name: "NVIDIA H100 80GB HBM3", Values: sv{MemoryUsed: 0.75}}}, 1},
		{"driver without _v2: not supported", func() (NVML, *mock.Device) {
			d := fakeDevice("GPU-a", 80*gib, 20*gib, nvml.ERROR_NOT_SUPPORTED)
			return fakeNVML(nvml.SUCCESS, d), d
		}, []GPUReading{{ID: "0", UUID: "GPU-a", Name: "NVIDIA H100 80GB HBM3", Values: sv{MemoryUsed: 0.75}}}, 1},
		{"driver without the _v2 symbol: never called", func() (NVML, *mock.Device) {
			d := fakeDevice("GPU-a", 80*gib, 20*gib, nvml.SUCCESS)
			d.GetMemoryInfo_v2Func = nil // a call would panic
			return noV2Library{fakeNVML(nvml.SUCCESS, d)}, d
		}, []GPUReading{{ID: "0", UUID: "GPU-a", Name: "NVIDIA H100 80GB HBM3", Values: sv{MemoryUsed: 0.75}}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lib, dev := tt.lib()
			s := newNVMLSource("nvml", lib, time.Now)
			for range 2 { // the second read reuses the first Init and the v1 fallback
				rd, err := s.Read(t.Context())
				if err != nil {
					t.Fatalf("Read() error = %v", err)
				}
				if len(rd.GPUs) != len(tt.want) {
					t.Fatalf("Read().GPUs = %+v, want %+v", rd.GPUs, tt.want)
				}
				for i, g := range rd.GPUs {
					w := tt.want[i]
					if g.ID != w.ID || g.UUID != w.UUID || g.Name != w.Name || !approxEqual(g.Values, w.Values) {
						t.Errorf("Read().GPUs[%d] = %+v, want %+v", i, g, w)
					}
				}
			}
			if n := len(dev.GetMemoryInfo_v2Calls()); n != tt.v2Calls {
				t.Errorf("GetMemoryInfo_v2 called %d times, want %d (a fallback is remembered)", n, tt.v2Calls)
			}
			if err := s.Close(); err != nil {
				t.Errorf("Close() = %v", err)
			}
			m := unwrapMock(lib)
			if len(m.InitCalls()) != 1 || len(m.ShutdownCalls()) != 1 {
				t.Errorf("Init, Shutdown called %d, %d times, want 1, 1", len(m.InitCalls()), len(m.ShutdownCalls()))
			}
		})
	}
}

func unwrapMock(lib NVML) *mock.Interface {
	if l, ok := lib.(noV2Library); ok {
		return l.Interface
	}
	return lib.(*mock.Interface)
}

func TestNVMLSourceInitFailure(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lib := fakeNVML(nvml.ERROR_LIBRARY_NOT_FOUND) // DeviceGetCount and the rest nil: calling them panics
	s := newNVMLSource("nvml", lib, func() time.Time { return now })
	steps := []struct {
		advance   time.Duration
		wantInits int
	}{
		{0, 1},
		{time.Second, 1},      // within the retry delay: no new Init
		{29 * time.Second, 2}, // 30s later: one retry
		{29 * time.Second, 2}, //
		{time.Second + 1, 3},  //
		{10 * time.Millisecond, 3},
	}
	for i, st := range steps {
		now = now.Add(st.advance)
		_, err := s.Read(t.Context())
		if err == nil || !strings.Contains(err.Error(), "NVML Shared Library Not Found") || !strings.HasPrefix(err.Error(), "pressure: nvml init") {
			t.Fatalf("step %d: Read() error = %v, want the NVML error string", i, err)
		}
		if got := len(lib.InitCalls()); got != st.wantInits {
			t.Fatalf("step %d: Init called %d times, want %d", i, got, st.wantInits)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if n := len(lib.ShutdownCalls()); n != 0 {
		t.Errorf("Shutdown called %d times after a failed Init, want 0", n)
	}
}

func TestNVMLSourceDeviceError(t *testing.T) {
	t.Parallel()
	d := fakeDevice("GPU-a", 100, 50, nvml.ERROR_GPU_IS_LOST)
	s := newNVMLSource("nvml", fakeNVML(nvml.SUCCESS, d), time.Now)
	if _, err := s.Read(t.Context()); err == nil || !strings.Contains(err.Error(), "GPU is lost") {
		t.Fatalf("Read() error = %v, want GPU is lost", err)
	}
	if n := len(d.GetMemoryInfoCalls()); n != 0 {
		t.Errorf("GetMemoryInfo called %d times after a hard _v2 error, want 0", n)
	}
}
