package discovery

import (
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

func TestExpandPools(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte(`
upstreams:
  - inference_pool: {name: llama}
    max_inflight: 32
    sources: [{kind: vllm, url: "http://pod:8000/metrics"}, {kind: memory_blocks, url: "http://pod:9400/memory"}]
  - {name: static, url: "http://10.0.9.9:8000"}
  - inference_pool: {name: qwen, namespace: other}
`))
	if err != nil {
		t.Fatal(err)
	}
	refs := PoolRefs(c, "ns")
	if len(refs) != 2 || refs[0] != (config.InferencePool{Name: "llama", Namespace: "ns"}) || refs[1].Namespace != "other" {
		t.Fatalf("PoolRefs = %+v", refs)
	}
	out := ExpandPools(c, Pools{refs[0]: {"10.0.0.1:8000", "[fd00::2]:8000"}}, "ns")
	var names, urls, srcs []string
	for _, u := range out.Upstreams {
		names, urls = append(names, u.Name), append(urls, u.URL)
		for _, s := range u.Sources {
			srcs = append(srcs, s.URL)
		}
		if u.InferencePool != nil {
			t.Errorf("%s still names its pool", u.Name)
		}
	}
	want := []string{"llama/10.0.0.1:8000", "llama/[fd00::2]:8000", "static"}
	if len(names) != 3 || names[0] != want[0] || names[1] != want[1] || names[2] != want[2] {
		t.Fatalf("names = %v, want %v (the unknown pool qwen adds none)", names, want)
	}
	if urls[0] != "http://10.0.0.1:8000" || urls[1] != "http://[fd00::2]:8000" {
		t.Errorf("urls = %v", urls)
	}
	if srcs[0] != "http://10.0.0.1:8000/metrics" || srcs[1] != "http://10.0.0.1:9400/memory" || srcs[3] != "http://[fd00::2]:9400/memory" {
		t.Errorf("sources = %v: each on its pod's IP, with its own port", srcs)
	}
	if !(Pools{refs[0]: {"a"}}).Equal(Pools{refs[0]: {"a"}}) || (Pools{refs[0]: {"a"}}).Equal(Pools{refs[0]: {"b"}}) {
		t.Error("Equal")
	}
}
