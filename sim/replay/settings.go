package replay

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/route"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/control"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// Policy is what stands in front of the engine.
type Policy int

// The policies every table compares (sim/replay/README.md, "The policies").
const (
	// None sends every request straight to the engine.
	None Policy = iota
	// QPSOnly puts gatekeeper's fast breaker (global token bucket) in front.
	QPSOnly
	// Gatekeeper runs the fast breaker, the slow breaker (level machine and
	// batch window) and the admission queue, as the proxy does, reading
	// the sources Settings.Sources lists (config.yaml's: the pod's
	// /metrics).
	Gatekeeper
	// DeadlineOnly is what a competent user gets from nginx or Envoy with a
	// queue timeout: gatekeeper's fast breaker and queue with the same
	// time-to-first-token deadline and Retry-After, a window fixed at the
	// pod's max_num_seqs, and no GPU signal: no pressure source, no memory
	// admission, no ceiling after a failure.
	DeadlineOnly
	// GatekeeperExporter is Gatekeeper with the allocator exporter in the
	// pod (a memory_blocks source) and memory admission (the model's
	// vocabulary, batch.memory_share).
	GatekeeperExporter
)

// Policies lists every policy, in the order tables show them.
func Policies() []Policy {
	return []Policy{None, QPSOnly, DeadlineOnly, Gatekeeper, GatekeeperExporter}
}

// String returns the policy's name as the table and -policies spell it.
func (p Policy) String() string {
	switch p {
	case None:
		return "unprotected"
	case QPSOnly:
		return "qps-only"
	case DeadlineOnly:
		return "deadline-only"
	case Gatekeeper:
		return "gatekeeper"
	case GatekeeperExporter:
		return "gatekeeper+exporter"
	}
	return "unknown"
}

// ParsePolicy is the policy String names.
func ParsePolicy(name string) (Policy, error) {
	for _, p := range Policies() {
		if p.String() == name {
			return p, nil
		}
	}
	return 0, fmt.Errorf("replay: unknown policy %q (want unprotected, qps-only, deadline-only, gatekeeper or gatekeeper+exporter)", name)
}

// queued reports whether the policy runs gatekeeper's queue and window.
func (p Policy) queued() bool { return p == DeadlineOnly || p == Gatekeeper || p == GatekeeperExporter }

// Settings configures one run. The zero value runs the default trace with
// no protection on the replay's default engine.
type Settings struct {
	// Engine is the simulated pod. Its zero fields take sim's defaults.
	Engine sim.Settings
	// Pods is how many pods serve the trace, each its own engine with
	// Engine's settings (allocator, KV cache, OOMs, restarts), behind one
	// gatekeeper queue with a window per pod (vllm-0, vllm-1, …), one
	// controller with an upstream per pod and per-pod pressure rounds. 0
	// means 1, the replay before the pool, figure for figure. Without a
	// queue (None, QPSOnly) the pods take the requests in turn.
	Pods int
	// PodEngines, if set, gives the first pods their own settings (a mixed
	// pool: another GPU, a neighbour on one node); pod i takes
	// PodEngines[i], the others Engine.
	PodEngines []sim.Settings
	// Autoscale, when its Mode is not StaticPool, adds and removes pods
	// during the run (queued policies only), starting from Pods.
	Autoscale AutoscaleSettings
	// Routing is how gatekeeper's queue picks a pod among those with room
	// (queued policies). The zero value is LeastLoaded, the queue's own
	// choice: the most free window.
	Routing Routing
	// Weights, when set, are the GatekeeperScore routing's weights (the
	// policy's routing.scorers: WithPolicy); nil means GatekeeperWeights.
	Weights *route.Weights
	// Scenario names the workload (Scenario.Apply sets it); a label only.
	Scenario string
	// Trace is the synthetic traffic, used when Source is nil.
	Trace TraceSettings
	// Conversations, when its Rate is above 0, replaces the synthetic trace
	// with multi-turn conversations (ConversationTrace) for Trace.Duration,
	// drawn from Trace.Seed.
	Conversations ConversationSettings
	// Source, if set, replaces the synthetic trace (e.g. a CSVTrace). The
	// run then lasts Trace.Duration when that is set, else until the source
	// ends. A source serves one run only.
	Source Source
	// Policy is what stands in front of the engine.
	Policy Policy
	// Limiter is the fast breaker (QPSOnly, Gatekeeper). A zero QPS means
	// the policy file's default: 80 QPS, burst 40.
	Limiter breaker.LimiterSettings
	// LimiterOff turns the fast breaker's global limit off (the policy
	// file's qps: 0); Limiter is then unused.
	LimiterOff bool
	// Slow is the slow breaker (Gatekeeper). Zero Rules mean the policy
	// file's defaults as control.SlowSettings maps them (fragmentation
	// 1.2/1.5 held 2s, kv_cache_usage 0.95, alloc_retry_rate 0.01, a pod's
	// own 503s, hysteresis 0.05, hold 5s, the pod's waiting requests as the
	// queue signal); a zero MaxInflight
	// means the engine's max_num_seqs, a zero MinInflight 4.
	Slow breaker.SlowSettings
	// Memory is memory admission (Gatekeeper), the policy's
	// upstreams[].vocab_size and batch.memory_share; the zero value is off.
	Memory control.Memory
	// MaxInflightTokens is the token-budget window (Gatekeeper), the
	// policy's upstreams[].max_inflight_tokens; 0 is off.
	MaxInflightTokens int64
	// BytesPerLogit is the policy's estimate.bytes_per_logit; each arrival's
	// memory is estimated as classify estimates a request (one sequence,
	// plus its prompt_logprobs). 0 means classify's default, 32.
	BytesPerLogit int64
	// PromptLogprobsChunk is the policy's estimate.prompt_logprobs_chunk:
	// the most prompt tokens a prompt_logprobs arrival's estimate counts. 0
	// means classify's default, 8192.
	PromptLogprobsChunk int64
	// Queue bounds the admission queue (Gatekeeper); zero fields take the
	// queue's defaults.
	Queue queue.Settings
	// MaxWait is how long a request may wait in the queue. 0 means 30s.
	MaxWait time.Duration
	// TTFTDeadline is the policy's queue.ttft_deadline (Gatekeeper): a
	// waiter that cannot start within it of its arrival is refused at once
	// (the queue's prediction) or when it passes. 0 means the policy file's
	// default; negative means none (max_wait alone).
	TTFTDeadline time.Duration
	// ClientDeadlines makes every arrival send its own time-to-first-token
	// deadline, its class's SLO TTFT, in the policy's deadline header
	// (queue.deadline_header; x-slo-ttft-ms for llm-d's clients), which
	// tightens TTFTDeadline (Gatekeeper).
	ClientDeadlines bool
	// DeadlineOrder is the policy's queue.order: earliest_deadline
	// (Gatekeeper).
	DeadlineOrder bool
	// NoFailureCeiling is a what-if of gatekeeper before issue 23: the
	// pod's deaths are not reported to the controller, so no window ceiling
	// follows them (Gatekeeper).
	NoFailureCeiling bool
	// Interval is the pressure sampling period (and the utilization
	// sampling period of every policy). 0 means 500ms.
	Interval time.Duration
	// StaleAfter is how long a pressure source may go without a good
	// reading before its values are stale (the policy's stale_after). 0
	// means 4 × Interval, as gatekeeper's.
	StaleAfter time.Duration
	// SeriesEvery, when > 0, records a Sample into Result.Series this often.
	SeriesEvery time.Duration
	// EmptyCacheOnDegraded fires the allocator's empty_cache relief hook
	// each time the level rises to degraded or critical (Gatekeeper).
	EmptyCacheOnDegraded bool
	// Clients is how each trace class's clients behave, by class name: a
	// class not in the map has the zero Client, which neither retries nor
	// gives up. Nil means DefaultClients (SDK retries; short requests are
	// interactive chats whose users give up after DefaultPatience).
	Clients map[string]Client
	// RetryAfter is the Retry-After gatekeeper sends with a 503 that names
	// no better time (the policy's shed.retry_after). 0 means the policy
	// file's default.
	RetryAfter time.Duration
	// SLO is the deadlines behind SLO goodput; the zero value selects the
	// defaults (short 2s, long 10s to the first token; 100ms per token).
	SLO SLO
	// Observer, if set, is called after every pressure round (Gatekeeper),
	// so a test can hold the replay's decisions against gatekeeper's.
	Observer func(Round)
	// Tenants makes the queue share between the trace's tenants
	// (Arrival.Tenant, TenantTrace) by its Virtual Token Counter
	// (Gatekeeper): each request is queued for its tenant, charged its
	// estimated service (prompt + 2 × max_tokens per sequence) when granted
	// and settled with the real one (prompt + 2 × the tokens generated) when
	// it ends. Off, every request is the default tenant's (the queue orders
	// as without tenants); Result.Tenants and Result.Fairness are measured
	// either way.
	Tenants bool
	// TenantPriority, if set, puts each listed tenant's requests at that
	// priority (a traffic class per tenant; others at 0), tenants on or off
	// (Gatekeeper): a what-if beside the fair share.
	TenantPriority map[string]int
	// Sources are the kinds of pressure source the policy reads for the pod
	// (Gatekeeper), its upstream's and the node's: vllm (the pod's
	// /metrics), memory_blocks (the allocator exporter), nvml or dcgm (device
	// memory). A signal no listed source yields is absent, as it is to
	// gatekeeper. Nil means the policy file's default, vllm alone: a plain
	// vLLM serves no allocator endpoint and the default lists no node
	// source. PolicySources maps a policy file's.
	Sources []pressure.Kind
}

// Round is one pressure round: what the controller was given and decided.
type Round struct {
	// Failures are the pods' failures since the previous round, each
	// reported to the controller (Controller.PodFailedAt) when it happened
	// (a Failure does not name its pod: a pool's are in the order they came).
	Failures     []Failure
	State        pressure.State
	BacklogEmpty bool
	Decision     control.Decision
	// Started counts, per pod of the pool, the attempts started on it so
	// far (vllm-0 first).
	Started []int64
}

// Failure is one death of the pod as gatekeeper sees it: its error breaker
// opens while Inflight sequences of its window run.
type Failure struct {
	At       time.Time
	Inflight int
}

func (s Settings) withDefaults() Settings {
	if s.LimiterOff {
		s.Limiter = breaker.LimiterSettings{}
	} else if s.Limiter.QPS == 0 {
		s.Limiter.QPS, s.Limiter.Burst = 80, 40
	}
	if s.Slow.Level.Rules == nil {
		// The policy file's defaults, mapped as gatekeeper maps them: one
		// source for the rules, so the replay cannot drift from the product.
		def := control.SlowSettings(config.Default(), config.Upstream{})
		s.Slow.Level, s.Slow.QueueSignal = def.Level, def.QueueSignal
	}
	if s.MaxWait == 0 {
		s.MaxWait = 30 * time.Second
	}
	if s.Interval == 0 {
		s.Interval = 500 * time.Millisecond
	}
	if s.Sources == nil {
		s.Sources = PolicySources(config.Default())
	}
	if s.RetryAfter == 0 {
		s.RetryAfter = config.Default().Shed.RetryAfter
	}
	if s.TTFTDeadline == 0 {
		s.TTFTDeadline = cmp.Or(config.Default().Queue.TTFTDeadline, -1)
	}
	s.SLO = s.SLO.withDefaults()
	switch s.Policy {
	case DeadlineOnly: // a plain queue: it reads nothing of the GPU and does not react to failures
		s.Sources = []pressure.Kind{}
		s.Memory, s.MaxInflightTokens = control.Memory{}, 0
		s.NoFailureCeiling, s.EmptyCacheOnDegraded = true, false
	case GatekeeperExporter:
		if !slices.Contains(s.Sources, pressure.KindMemoryBlocks) {
			s.Sources = append(slices.Clone(s.Sources), pressure.KindMemoryBlocks)
		}
		if s.Memory.VocabSize == 0 {
			m := s.Engine.Model
			if m == (sim.Model{}) {
				m, _ = sim.ModelByName("")
			}
			s.Memory.VocabSize = int64(m.Vocab)
		}
		if s.Memory.Share == 0 {
			s.Memory.Share = config.Default().Batch.MemoryShare
		}
	}
	return s
}
