package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestDefaultBuildNeedsNoCgo: the default build of gatekeeper, the image's
// static binary, depends on no package outside the standard library that
// uses cgo (the standard library's, net and os/user, fall back to pure Go);
// go-nvml, and with it cgo, comes in only with the nvml build tag. This is
// go list's quick answer, so every `go test` keeps it; scripts/test.sh also
// builds the binary with CGO_ENABLED=0 (a cold build of its own, minutes on
// a busy machine, which would not fit this package's test time).
func TestDefaultBuildNeedsNoCgo(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	const nvml = "github.com/NVIDIA/go-nvml/pkg/nvml"
	tests := []struct {
		tags     string
		wantNVML bool // go-nvml is built, and only its packages use cgo
	}{
		{tags: "", wantNVML: false},
		{tags: "nvml", wantNVML: true},
	}
	for _, tt := range tests {
		t.Run("tags="+tt.tags, func(t *testing.T) {
			t.Parallel()
			out, err := exec.CommandContext(t.Context(), goBin, "list", "-deps", "-tags", tt.tags,
				"-f", "{{if and (not .Standard) .CgoFiles}}{{.ImportPath}}{{end}}", ".").Output()
			if err != nil {
				t.Fatalf("go list -deps -tags %q: %v", tt.tags, err)
			}
			cgo := strings.Fields(string(out))
			if !tt.wantNVML && len(cgo) > 0 {
				t.Errorf("the default build compiles cgo in %v; keep such a dependency behind a build tag", cgo)
			}
			for _, p := range cgo {
				if tt.wantNVML && !strings.HasPrefix(p, "github.com/NVIDIA/go-nvml/") {
					t.Errorf("-tags %s compiles cgo in %s, not only in go-nvml", tt.tags, p)
				}
			}
			if got := slices.Contains(cgo, nvml); got != tt.wantNVML {
				t.Errorf("-tags %q builds %s: %v, want %v", tt.tags, nvml, got, tt.wantNVML)
			}
		})
	}
}
