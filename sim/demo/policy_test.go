package demo

import (
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

func TestPolicyValidates(t *testing.T) {
	cfg, err := config.Parse(Policy("http://127.0.0.1:12345", "127.0.0.1:8080", "127.0.0.1:9090", time.Second))
	if err != nil {
		t.Fatalf("config.Parse(Policy) = %v", err)
	}
	if len(cfg.Upstreams) != 1 || cfg.Upstreams[0].Name != Upstream || cfg.Upstreams[0].MaxInflight != MaxSeqs {
		t.Fatalf("upstreams = %+v, want one %s with max_inflight %d", cfg.Upstreams, Upstream, MaxSeqs)
	}
	kinds := map[config.SourceKind]string{}
	for _, s := range cfg.Upstreams[0].Sources {
		kinds[s.Kind] = s.URL
	}
	if kinds[config.SourceKind("vllm")] != "http://127.0.0.1:12345/metrics" ||
		kinds[config.SourceKind("memory_blocks")] != "http://127.0.0.1:12345/v1/internal/metrics" {
		t.Errorf("sources = %v, want vllm /metrics and memory_blocks /v1/internal/metrics on the pod", kinds)
	}
	if len(cfg.Hooks.Degraded) != 1 || !strings.HasSuffix(cfg.Hooks.Degraded[0].URL, "/v1/internal/empty_cache") {
		t.Errorf("degraded hooks = %+v, want the pod's empty_cache", cfg.Hooks.Degraded)
	}
	if cfg.Server.DrainDelay != time.Second {
		t.Errorf("drain_delay = %v, want 1s", cfg.Server.DrainDelay)
	}
}
