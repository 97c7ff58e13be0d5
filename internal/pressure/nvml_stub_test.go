//go:build !nvml

package pressure

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
)

// TestNVMLNotCompiled: without the nvml build tag a policy may still list an
// nvml source (the Monitor builds it), but every read fails with
// ErrNVMLNotCompiled, whose text names the build tag and the two exporters
// that carry the same facts; the source's state shows it.
func TestNVMLNotCompiled(t *testing.T) {
	if NVMLCompiled {
		t.Fatal("NVMLCompiled = true in a build without the nvml tag")
	}
	_, err := newNVML("nvml", nil, nil).Read(t.Context())
	if !errors.Is(err, ErrNVMLNotCompiled) {
		t.Fatalf("Read() = %v, want ErrNVMLNotCompiled", err)
	}
	for _, w := range []string{"-tags nvml", "kind: dcgm", "kind: memory_blocks"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Read() = %q, want it to mention %s", err, w)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		m := newMonitor(t, Settings{
			Sources:   []SourceSettings{{Kind: KindNVML}},
			Upstreams: []UpstreamSettings{{Name: "vllm-0", GPUs: []string{"0"}}},
		})
		start(t, m)
		src := m.snapshot().Sources
		if len(src) != 1 || src[0].Name != "nvml" || src[0].Up || src[0].LastError != ErrNVMLNotCompiled.Error() {
			t.Errorf("Sources = %+v, want nvml down with ErrNVMLNotCompiled", src)
		}
	})
}
