package pressure

import (
	"fmt"
	"net/http"
)

// vLLM metric names (V1 and V0 engines). vLLM ≥ 0.10 exports
// kv_cache_usage_perc; older servers only gpu_cache_usage_perc.
const (
	vllmKVUsage     = "vllm:kv_cache_usage_perc"
	vllmGPUCache    = "vllm:gpu_cache_usage_perc"
	vllmRunning     = "vllm:num_requests_running"
	vllmWaiting     = "vllm:num_requests_waiting"
	vllmPreemptions = "vllm:num_preemptions_total"
)

// ParseVLLMMetrics reads a vLLM server's Prometheus text /metrics and returns
// its upstream-level signals: KVCacheUsage (the maximum over series, e.g.
// engines), Running and Waiting (sums), and the preemption counter (sum) in
// Counters[PreemptionRate]. Series with or without an engine label count
// alike; _created families and everything else are ignored. A metric the
// server does not export leaves its signal absent; a body without any of
// them (a wrong URL) is ErrNoMetrics. Lines of other families are not
// parsed, so a malformed one elsewhere does not fail the read.
func ParseVLLMMetrics(data []byte) (Reading, error) {
	fams, err := parseFamilies(data, vllmKVUsage, vllmGPUCache, vllmRunning, vllmWaiting, vllmPreemptions)
	if err != nil {
		return Reading{}, err
	}
	rd := Reading{Values: map[Signal]float64{}, Counters: map[Signal]float64{}}
	if v, ok := aggregate(fams, vllmKVUsage, true); ok {
		rd.Values[KVCacheUsage] = v
	} else if v, ok := aggregate(fams, vllmGPUCache, true); ok {
		rd.Values[KVCacheUsage] = v
	}
	if v, ok := aggregate(fams, vllmRunning, false); ok {
		rd.Values[Running] = v
	}
	if v, ok := aggregate(fams, vllmWaiting, false); ok {
		rd.Values[Waiting] = v
	}
	if v, ok := aggregate(fams, vllmPreemptions, false); ok {
		rd.Counters[PreemptionRate] = v
	}
	if len(rd.Values) == 0 && len(rd.Counters) == 0 {
		return Reading{}, fmt.Errorf("pressure: vllm: %w", ErrNoMetrics)
	}
	return rd, nil
}

// newVLLMSource reads a vLLM pod's /metrics.
func newVLLMSource(name, url string, c *http.Client) *httpSource {
	return &httpSource{name: name, parse: ParseVLLMMetrics, get: getter(c, url, KindVLLM)}
}
