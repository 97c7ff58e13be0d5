package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"
)

// TestDefaultYAMLMatchesBuiltin keeps the annotated file honest: decoded
// over nothing, it must state exactly the values a left-out key takes.
func TestDefaultYAMLMatchesBuiltin(t *testing.T) {
	t.Parallel()
	var got Config
	if errs, err := got.decode(defaultYAML); err != nil || len(errs) > 0 {
		t.Fatalf("decode(default.yaml) = %v, %v", errs, err)
	}
	want := builtin()
	got.Pressure.Sources, got.Hooks = nil, Hooks{} // lists start empty in both
	for _, section := range []struct {
		name      string
		got, want any
	}{
		{"mode", got.Mode, want.Mode},
		{"server", got.Server, want.Server},
		{"transport", got.Transport, want.Transport},
		{"health_check", got.HealthCheck, want.HealthCheck},
		{"pressure", got.Pressure, want.Pressure},
		{"fast_breaker", got.FastBreaker, want.FastBreaker},
		{"batch", got.Batch, want.Batch},
		{"queue", got.Queue, want.Queue},
		{"routing", got.Routing, want.Routing},
		{"estimate", got.Estimate, want.Estimate},
		{"shed", got.Shed, want.Shed},
		{"upstream_breaker", got.UpstreamBreaker, want.UpstreamBreaker},
		{"hooks", got.Hooks, want.Hooks},
		{"log", got.Log, want.Log},
	} {
		if !reflect.DeepEqual(section.got, section.want) {
			t.Errorf("default.yaml %s = %+v, builtin %+v", section.name, section.got, section.want)
		}
	}
	var u Upstream
	u.setDefaults()
	if d := Default().Upstreams[0]; d.MaxInflight != u.MaxInflight || d.MinInflight != u.MinInflight {
		t.Errorf("default.yaml upstream window %d..%d, builtin %d..%d", d.MinInflight, d.MaxInflight, u.MinInflight, u.MaxInflight)
	}
}

// TestDefaultYAMLNamesEveryKey checks that default.yaml writes out every key
// of every section (optional sections and list elements other than the
// upstream aside), so that it documents them all.
func TestDefaultYAMLNamesEveryKey(t *testing.T) {
	t.Parallel()
	c := Default()
	var walk func(path string, typ reflect.Type)
	walk = func(path string, typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() || f.Type.Kind() == reflect.Pointer {
				continue // optional sections are shown commented out
			}
			p := join(path, fieldName(f))
			if _, ok := c.lines[p]; !ok {
				t.Errorf("default.yaml lacks %s", p)
			}
			if f.Type.Kind() == reflect.Struct && f.Type != durationType {
				walk(p, f.Type)
			}
		}
	}
	walk("", reflect.TypeFor[Config]())
	walk("upstreams[0]", reflect.TypeFor[Upstream]())
}

func fieldName(f reflect.StructField) string {
	return f.Tag.Get("yaml")
}

// TestRootConfigIsDefault checks that the repository's config.yaml (what
// README points to) is the embedded default, byte for byte.
func TestRootConfigIsDefault(t *testing.T) {
	t.Parallel()
	root, err := os.ReadFile("../../config.yaml")
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("not run from the repository: the root config.yaml is absent")
	}
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(root, defaultYAML) {
		t.Errorf("config.yaml (repository root) differs from internal/config/default.yaml; copy one over the other")
	}
}

func TestDefault(t *testing.T) {
	t.Parallel()
	c := Default()
	u := c.Upstreams[0]
	got := fmt.Sprintf("%s %s %d..%d %v %d sources; rules %d; mode %s", u.Name, u.URL,
		u.MinInflight, u.MaxInflight, u.GPUs, len(u.Sources), len(c.Pressure.Rules), c.Mode)
	// Only sources a plain vLLM answers (DESIGN §3): its /metrics.
	want := "vllm-0 http://127.0.0.1:8000 4..256 [0] 1 sources; rules 3; mode enforce"
	if got != want {
		t.Errorf("Default() = %s, want %s", got, want)
	}
	if n := u.Sources[0].Name; n != "vllm:http://127.0.0.1:8000/metrics" {
		t.Errorf("derived source name = %q", n)
	}
	if c.Transport.IdleConnTimeout >= 5*time.Second {
		t.Errorf("idle_conn_timeout %v must stay below uvicorn's 5s keep-alive", c.Transport.IdleConnTimeout)
	}
	c.Upstreams[0].Name = "changed"
	if Default().Upstreams[0].Name != "vllm-0" {
		t.Errorf("Default() shares state between calls")
	}
	if !bytes.Equal(DefaultYAML(), defaultYAML) {
		t.Errorf("DefaultYAML() differs from the embedded file")
	}
}
