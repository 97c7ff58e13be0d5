package demo

import (
	"fmt"
	"time"
)

// Policy is the demo's policy file for the pod at podURL, served on listen
// and adminListen: the defaults of config.yaml except what a one-pod loopback
// demo needs (max_inflight = MaxSeqs, both of the pod's pressure sources, its
// empty_cache as the degraded hook). The caller parses and validates it like
// a user's file.
func Policy(podURL, listen, adminListen string, drainDelay time.Duration) []byte {
	return fmt.Appendf(nil, `# gatekeeper -demo: one simulated vLLM pod on loopback.
mode: enforce
server:
  listen: %q
  admin_listen: %q
  drain_delay: %s        # no load balancer to warn in a demo
  shutdown_timeout: 10s
upstreams:
  - name: %s
    url: %q
    max_inflight: %d     # = the simulated pod's max_num_seqs
    min_inflight: 4
    vocab_size: 128256   # Llama 3: memory admission on (its budget shows in /admin/state)
    sources:
      - {kind: vllm, url: %q}
      - {kind: memory_blocks, url: %q}
health_check:
  interval: 2s
pressure:
  interval: 500ms
  hold: 3s               # leave a level after 3 s below it (default 5 s)
fast_breaker:
  qps: 8                 # -demo-load's bursts (8 QPS) meet a few 429s
  burst: 4
queue:
  max_length: 256
  max_wait: 20s
  ttft_deadline: 0s      # no deadline: the demo keeps its bursts' backlog to show the window and recovery
estimate:
  prompt_logprobs_chunk: 2048   # the pod's max_num_batched_tokens
hooks:
  degraded:
    - {method: POST, url: /v1/internal/empty_cache}   # the pod flushes its allocator cache
`, listen, adminListen, drainDelay, Upstream, podURL, MaxSeqs,
		podURL+"/metrics", podURL+"/v1/internal/metrics")
}
