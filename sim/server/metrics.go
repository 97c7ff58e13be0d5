package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// snapshot advances the engine to now and reads its metrics.
func (srv *Server) snapshot() sim.Metrics {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	srv.advance()
	return srv.e.Metrics()
}

// health answers 200 with an empty body while the engine serves and 503
// while it restarts, as vLLM's /health does (a dead vLLM is gone altogether).
func (srv *Server) health(w http.ResponseWriter, _ *http.Request) {
	if !srv.snapshot().Alive {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (srv *Server) models(w http.ResponseWriter, _ *http.Request) {
	srv.mu.Lock()
	maxLen := srv.e.Settings().MaxModelLen
	created := srv.start.Unix()
	srv.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []map[string]any{{
		"id": srv.name, "object": "model", "created": created, "owned_by": "vllm",
		"root": srv.name, "parent": nil, "max_model_len": maxLen,
	}}})
}

// metrics writes vLLM's metric families (names, HELP and TYPE as vLLM V1
// serves them), DCGM-style framebuffer gauges in MiB and the simulator's own
// lifetime figures, in the Prometheus text format. While the engine restarts
// it answers 503: a dead vLLM serves no metrics.
func (srv *Server) metrics(w http.ResponseWriter, _ *http.Request) {
	m := srv.snapshot()
	if !m.Alive {
		writeError(w, http.StatusServiceUnavailable, msgUnavailable)
		return
	}
	srv.mu.Lock()
	util := srv.e.Settings().GPUMemoryUtilization
	pc := srv.e.PrefixCache()
	srv.mu.Unlock()
	var b strings.Builder
	lbl := fmt.Sprintf(`{engine="0",model_name=%q}`, srv.name)
	family := func(name, typ, help string, lines ...string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
		for _, l := range lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
		"vllm:num_requests_running"+lbl+" "+num(float64(m.Running)))
	family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
		"vllm:num_requests_waiting"+lbl+" "+num(float64(m.Waiting)))
	family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
		"vllm:kv_cache_usage_perc"+lbl+" "+num(m.KVCacheUsage))
	family("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
		"vllm:num_preemptions_total"+lbl+" "+num(float64(m.Counters.Preemptions)))
	family("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
		"vllm:prompt_tokens_total"+lbl+" "+num(float64(m.Counters.PromptTokens)))
	family("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
		"vllm:generation_tokens_total"+lbl+" "+num(float64(m.Counters.GenerationTokens)))
	family("vllm:request_success_total", "counter", "Count of successfully processed requests.",
		"vllm:request_success_total"+lbl+" "+num(float64(m.Counters.RequestSuccess)))
	family("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.",
		"vllm:prefix_cache_queries_total"+lbl+" "+num(float64(pc.Queries)))
	family("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
		"vllm:prefix_cache_hits_total"+lbl+" "+num(float64(pc.Hits)))
	family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig",
		fmt.Sprintf(`vllm:cache_config_info{block_size="%d",engine="0",gpu_memory_utilization="%s",num_gpu_blocks="%d"} 1`,
			m.BlockSize, num(util), m.NumGPUBlocks))
	gpu := fmt.Sprintf(`{gpu=%q}`, srv.s.GPUID)
	family("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
		"DCGM_FI_DEV_FB_USED"+gpu+" "+num(float64(m.Device.UsedBytes>>20)))
	family("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
		"DCGM_FI_DEV_FB_FREE"+gpu+" "+num(float64(m.Device.FreeBytes>>20)))
	family("vllm_sim_engine_ooms_total", "counter", "Out-of-memory deaths of the simulated engine since the simulator started.",
		"vllm_sim_engine_ooms_total "+num(float64(m.OOMs)))
	family("vllm_sim_alloc_retries_total", "counter", "Allocation retries after a cache flush in the current engine process.",
		"vllm_sim_alloc_retries_total "+num(float64(m.Allocator.NumAllocRetries)))
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write([]byte(b.String()))
}

// memoryBlocks serves DESIGN §3's allocator endpoint. While the engine
// restarts it answers 503, like a process that is gone.
func (srv *Server) memoryBlocks(w http.ResponseWriter, _ *http.Request) {
	srv.mu.Lock()
	srv.advance()
	alive := srv.e.Alive()
	mb := srv.e.MemoryBlocks(srv.s.GPUID)
	srv.mu.Unlock()
	if !alive {
		writeError(w, http.StatusServiceUnavailable, msgUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string][]sim.MemoryBlocks{"memory_blocks": {mb}})
}

// emptyCache is the relief hook: torch.cuda.empty_cache() in the engine,
// answered as the allocator exporter answers it (exporters/pytorch,
// POST /v1/internal/empty_cache): the bytes released in all and per device,
// reserved before and after, and the time it took (none in virtual time).
func (srv *Server) emptyCache(w http.ResponseWriter, _ *http.Request) {
	srv.mu.Lock()
	srv.advance()
	alive := srv.e.Alive()
	before := srv.e.Metrics().Allocator.ReservedBytes
	released := srv.e.EmptyCache()
	srv.mu.Unlock()
	if !alive {
		writeError(w, http.StatusServiceUnavailable, msgUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(emptyCacheAnswer{ReleasedBytes: released, Devices: []emptyCacheDevice{{
		GPUID: srv.s.GPUID, ReservedBeforeBytes: before, ReservedAfterBytes: before - released, ReleasedBytes: released}}})
}

// emptyCacheAnswer is the exporter's empty_cache answer.
type emptyCacheAnswer struct {
	ReleasedBytes int64              `json:"released_bytes"`
	DurationS     float64            `json:"duration_s"`
	Devices       []emptyCacheDevice `json:"devices"`
}

type emptyCacheDevice struct {
	GPUID               string `json:"gpu_id"`
	ReservedBeforeBytes int64  `json:"reserved_before_bytes"`
	ReservedAfterBytes  int64  `json:"reserved_after_bytes"`
	ReleasedBytes       int64  `json:"released_bytes"`
}

// resetPrefixCache answers vLLM's POST /reset_prefix_cache. It only
// acknowledges: the simulated prefix cache is not emptied (a departure, see
// sim/README.md).
func (srv *Server) resetPrefixCache(w http.ResponseWriter, _ *http.Request) {
	if !srv.snapshot().Alive {
		writeError(w, http.StatusServiceUnavailable, msgUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}
