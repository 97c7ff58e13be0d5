package replay

import (
	"cmp"
	"net/url"
	"slices"
	"strings"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// emptyCachePath is the simulated pod's relief endpoint (sim/server's
// /v1/internal/empty_cache).
const emptyCachePath = "/v1/internal/empty_cache"

// WithPolicy maps a validated policy file onto s, the replay's gatekeeper
// policy. The slow path — rules in config.Signals order, hysteresis, hold,
// on_stale, batch — goes through control.SlowSettings, the mapping
// cmd/gatekeeper uses too; fast_breaker, queue, shed, pressure.interval and
// stale_after, the first upstream's min_inflight and the kinds of source it
// and the node read (a policy without memory_blocks has no fragmentation,
// allocator or free-memory signal, as in front of a plain vLLM) come along;
// the window's top is the replayed pod's max_num_seqs, as config.yaml tells
// the operator to set max_inflight. A degraded or critical hook that POSTs the pod's empty_cache endpoint turns
// on the replay's relief hook. What the replay has no counterpart for is
// left out: mode (the replay always enforces: the question is what the
// policy would have done), per-client limits (a trace has no client keys),
// the sources' addresses and timeouts, the upstream breaker and health check (one availability switch,
// sim/replay/README.md), server, transport, estimate and log.
func WithPolicy(c *config.Config, s Settings) Settings {
	s.Limiter = breaker.LimiterSettings{QPS: c.FastBreaker.QPS, Burst: c.FastBreaker.Burst}
	s.LimiterOff = c.FastBreaker.QPS == 0
	u := config.Upstream{}
	if len(c.Upstreams) > 0 {
		u = c.Upstreams[0]
	}
	s.Slow = control.SlowSettings(c, u)
	s.Slow.Window.MaxInflight = 0 // the replayed pod's max_num_seqs
	s.Memory = control.Memory{VocabSize: u.VocabSize, Share: c.Batch.MemoryShare}
	s.BytesPerLogit = int64(c.Estimate.BytesPerLogit)
	s.PromptLogprobsChunk = int64(c.Estimate.PromptLogprobsChunk)
	s.MaxInflightTokens = u.MaxInflightTokens
	s.Queue = queue.Settings{
		MaxLength:       c.Queue.MaxLength,
		MaxTokens:       c.Queue.MaxTokens,
		StarvationAfter: c.Queue.StarvationAfter,
	}
	s.MaxWait = c.Queue.MaxWait
	s.RetryAfter = c.Shed.RetryAfter
	s.TTFTDeadline = cmp.Or(c.Queue.TTFTDeadline, -1) // the replay's 0 is the default file's
	s.DeadlineOrder = c.Queue.Order == config.OrderEarliestDeadline
	s.ClientDeadlines = s.ClientDeadlines && c.Queue.DeadlineHeader != "" // a client can only send what the policy reads
	w := WeightsOf(c.Routing.Scorers)
	s.Weights = &w
	s.Interval = c.Pressure.Interval
	s.StaleAfter = c.Pressure.StaleAfter
	s.Sources = PolicySources(c)
	s.EmptyCacheOnDegraded = false
	exporters := exporterHosts(u)
	for _, h := range append(append([]config.Hook(nil), c.Hooks.Degraded...), c.Hooks.Critical...) {
		if isEmptyCache(h, u.URL, exporters) {
			s.EmptyCacheOnDegraded = true
		}
	}
	return s
}

// exporterHosts are the host:port of the upstream's allocator endpoints
// (its memory_blocks sources): the allocator exporter in the pod, or the
// simulated pod, which serves both on its own port.
func exporterHosts(u config.Upstream) []string {
	var hosts []string
	for _, src := range u.Sources {
		if src.Kind != config.SourceMemoryBlocks {
			continue
		}
		if v, err := url.Parse(src.URL); err == nil {
			hosts = append(hosts, v.Host)
		}
	}
	return hosts
}

// isEmptyCache reports whether a hook POSTs the empty_cache endpoint of one
// of the pod's allocator endpoints: relief is credited only through the
// contract the allocator exporter serves (exporters/pytorch's
// POST /v1/internal/empty_cache), never for a hook a real pod would answer
// with 404. A path is resolved against the upstream (config's
// Hook.ResolveURL): it counts only when the pod itself serves the
// allocator endpoint, as the simulated pod does.
func isEmptyCache(h config.Hook, upstream string, exporters []string) bool {
	if h.Method != "" && !strings.EqualFold(h.Method, "POST") {
		return false
	}
	abs, err := h.ResolveURL(upstream)
	if err != nil {
		return false
	}
	v, err := url.Parse(abs)
	if err != nil || v.Path != emptyCachePath {
		return false
	}
	return slices.Contains(exporters, v.Host)
}
