//go:build nvml

package probe

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

func fakeNVML(initRet nvml.Return) *mock.Interface {
	dev := &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return "GPU-aaa", nvml.SUCCESS },
		GetNameFunc: func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS },
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: 80 << 30, Free: 20 << 30}, nvml.SUCCESS
		},
	}
	return &mock.Interface{
		InitFunc:           func() nvml.Return { return initRet },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		ErrorStringFunc:    func(nvml.Return) string { return "NVML Shared Library Not Found" },
		DeviceGetCountFunc: func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(int) (nvml.Device, nvml.Return) {
			return dev, nvml.SUCCESS
		},
	}
}

func TestReadNVML(t *testing.T) {
	t.Parallel()
	lib := fakeNVML(nvml.SUCCESS)
	r, err := Read(t.Context(), Settings{Kind: pressure.KindNVML, nvml: lib})
	if err != nil {
		t.Fatalf("Read(nvml) = %v", err)
	}
	if got, want := table(r.Rows), "memory_used 0 0.75; "; got != want || r.Rows[0].uuid != "GPU-aaa" {
		t.Errorf("Read(nvml) rows = %s (%+v), want %s with GPU-aaa", got, r.Rows, want)
	}
	if n := len(lib.ShutdownCalls()); n != 1 {
		t.Errorf("NVML Shutdown called %d times, want 1", n)
	}
	_, err = Read(t.Context(), Settings{Kind: pressure.KindNVML, nvml: fakeNVML(nvml.ERROR_LIBRARY_NOT_FOUND)})
	if err == nil || !strings.Contains(err.Error(), "probe: pressure: nvml init: NVML Shared Library Not Found") {
		t.Errorf("Read(nvml without a driver) = %v, want the init error", err)
	}
}
