package discovery

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

func TestExpand(t *testing.T) {
	cfg, err := config.Parse([]byte(`
upstreams:
  - name: pods
    url: http://vllm.ns.svc:8000/base
    dns_interval: 5s
    sources: [{kind: vllm, url: "http://vllm.ns.svc:8000/metrics"}, {kind: memory_blocks, url: "http://other:9/m"}]
  - name: fixed
    url: http://10.1.1.1:8000
`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		r    Resolved
		want []string // name url source0 source1
	}{
		{name: "not resolved yet", r: Resolved{}, want: []string{
			"pods http://vllm.ns.svc:8000/base http://vllm.ns.svc:8000/metrics http://other:9/m",
			"fixed http://10.1.1.1:8000"}},
		{name: "two addresses", r: Resolved{"vllm.ns.svc": {"10.0.0.1", "fd00::2"}}, want: []string{
			"pods/10.0.0.1 http://10.0.0.1:8000/base http://10.0.0.1:8000/metrics http://other:9/m",
			"pods/fd00::2 http://[fd00::2]:8000/base http://[fd00::2]:8000/metrics http://other:9/m",
			"fixed http://10.1.1.1:8000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, u := range Expand(cfg, tt.r).Upstreams {
				line := u.Name + " " + u.URL
				for _, s := range u.Sources {
					line += " " + s.URL
				}
				got = append(got, line)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("Expand() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
	if len(cfg.Upstreams) != 2 || cfg.Upstreams[0].Name != "pods" {
		t.Error("Expand changed its input")
	}
	if got := Hosts(cfg); !slices.Equal(got, []string{"vllm.ns.svc"}) {
		t.Errorf("Hosts() = %v, want [vllm.ns.svc]", got)
	}
}

func TestResolve(t *testing.T) {
	prev := Resolved{"a": {"10.0.0.9"}, "b": {"10.0.0.8"}}
	answers := map[string][]string{"a": {"10.0.0.2", "10.0.0.1", "10.0.0.2"}, "b": nil}
	lookup := func(_ context.Context, host string) ([]string, error) {
		if host == "c" {
			return nil, errors.New("no such host")
		}
		return answers[host], nil
	}
	got := Resolve(t.Context(), lookup, []string{"a", "b", "c"}, prev)
	// a: sorted and deduplicated; b: an empty answer keeps prev's; c: a
	// failed lookup with nothing known stays empty.
	want := Resolved{"a": {"10.0.0.1", "10.0.0.2"}, "b": {"10.0.0.8"}, "c": nil}
	if !got.Equal(want) || len(got) != 3 {
		t.Errorf("Resolve() = %v, want %v", got, want)
	}
	if got.Equal(prev) {
		t.Errorf("Resolved(%v).Equal(%v) = true, want false", got, prev)
	}
}
