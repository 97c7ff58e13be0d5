//go:build !nvml

package probe

import (
	"errors"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// TestReadNVMLNotCompiled: without the nvml build tag, probe -kind nvml says
// so at once instead of starting a Monitor whose source can only fail.
func TestReadNVMLNotCompiled(t *testing.T) {
	t.Parallel()
	_, err := Read(t.Context(), Settings{Kind: pressure.KindNVML})
	if !errors.Is(err, pressure.ErrNVMLNotCompiled) {
		t.Fatalf("Read(nvml) = %v, want pressure.ErrNVMLNotCompiled", err)
	}
}
