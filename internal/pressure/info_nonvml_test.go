//go:build !nvml

package pressure

import (
	"testing"
	"time"
)

// nvmlReading is nil without the nvml build tag: the default build has no
// NVML source to read (TestSignalInfo checks NVML's signals under -tags nvml).
func nvmlReading(time.Time) func(t *testing.T) Reading { return nil }
