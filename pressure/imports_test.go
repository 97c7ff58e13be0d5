package pressure

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports fences pressure's dependencies (ARCHITECTURE.md): the
// standard library, go-nvml and prometheus/common; no metrics registry and
// no other gatekeeper package.
func TestImports(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(dep, "github.com/prometheus/client_golang"),
			strings.HasPrefix(dep, "github.com/gatekeeper-dev/gatekeeper/") && dep != "github.com/gatekeeper-dev/gatekeeper/pressure":
			t.Errorf("pressure depends on %s", dep)
		}
	}
}
