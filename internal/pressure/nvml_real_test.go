//go:build nvml

package pressure

import (
	"os"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestRealNVML reads the node's GPUs through the real driver library and
// prints what the nvml source sees. It runs only on request, on a machine
// with an NVIDIA driver:
//
//	PRESSURE_REAL_NVML=1 go test -tags nvml -run TestRealNVML -v ./pressure/
func TestRealNVML(t *testing.T) {
	if os.Getenv("PRESSURE_REAL_NVML") == "" {
		t.Skip("set PRESSURE_REAL_NVML=1 on a machine with an NVIDIA driver")
	}
	s := newNVMLSource("nvml", nvml.New(), time.Now)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	for i := range 2 {
		rd, err := s.Read(t.Context())
		if err != nil {
			t.Fatalf("Read() = %v", err)
		}
		t.Logf("read %d: _v2 available: %v", i, !s.noV2)
		for _, g := range rd.GPUs {
			t.Logf("gpu %s %s %q memory_used %.4f", g.ID, g.UUID, g.Name, g.Values[MemoryUsed])
		}
		if len(rd.GPUs) == 0 {
			t.Error("Read() found no GPU")
		}
	}
}
