//go:build nvml

package pressure

import (
	"context"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlReading is a full NVML reading from a fake device, for TestSignalInfo.
func nvmlReading(t0 time.Time) func(t *testing.T) Reading {
	return func(t *testing.T) Reading {
		src := newNVMLSource("nvml", fakeNVML(nvml.SUCCESS, fakeDevice("GPU-a", 80<<30, 8<<30, nvml.SUCCESS)), func() time.Time { return t0 })
		rd, err := src.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return rd
	}
}
