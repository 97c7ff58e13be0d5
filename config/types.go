package config

import (
	"log/slog"
	"time"
)

// Config is one policy file, decoded. Load, LoadFile, Parse and Default
// return it with defaults filled in and validated; a Config built or changed
// in code should be checked with Validate. It holds no locks and is not
// modified by this package after it is returned, so it may be shared read-only.
type Config struct {
	// Mode is enforce (refuse and delay work) or observe (only count and log).
	Mode Mode `yaml:"mode"`
	// Server configures the two listeners and the shutdown sequence.
	Server Server `yaml:"server"`
	// Upstreams are the vLLM pods behind gatekeeper; at least one.
	Upstreams []Upstream `yaml:"upstreams"`
	// Transport bounds the connections to the upstreams.
	Transport Transport `yaml:"transport"`
	// HealthCheck is the active probe of every upstream.
	HealthCheck HealthCheck `yaml:"health_check"`
	// Pressure is how GPU pressure is read and judged.
	Pressure Pressure `yaml:"pressure"`
	// FastBreaker is the QPS limit (token buckets).
	FastBreaker FastBreaker `yaml:"fast_breaker"`
	// Batch is how the per-upstream window is cut and ramped.
	Batch Batch `yaml:"batch"`
	// Queue bounds the admission queue.
	Queue Queue `yaml:"queue"`
	// Estimate turns a request body into an estimated token count.
	Estimate Estimate `yaml:"estimate"`
	// Shed is what a refused client is told.
	Shed Shed `yaml:"shed"`
	// UpstreamBreaker is the per-upstream error breaker.
	UpstreamBreaker UpstreamBreaker `yaml:"upstream_breaker"`
	// Hooks are the relief calls made on entering a level.
	Hooks Hooks `yaml:"hooks"`
	// Log configures the process log.
	Log Log `yaml:"log"`

	// lines maps a key path ("upstreams[1].url") to its line in the file it
	// was decoded from; nil for a Config built in code.
	lines map[string]int
}

// Mode says whether decisions are applied or only observed.
type Mode string

// The modes.
const (
	ModeEnforce Mode = "enforce" // refuse, queue and slow down work (the default)
	ModeObserve Mode = "observe" // compute, count and log every decision; refuse nothing
)

// Server configures the traffic and admin listeners.
type Server struct {
	Listen            string        `yaml:"listen"`              // traffic, /healthz, /readyz; host:port
	AdminListen       string        `yaml:"admin_listen"`        // /metrics, /admin/state; host:port
	MaxBodyBytes      int64         `yaml:"max_body_bytes"`      // request bodies above this get 413
	DrainDelay        time.Duration `yaml:"drain_delay"`         // SIGTERM: keep serving this long after /readyz turns 503
	ShutdownTimeout   time.Duration `yaml:"shutdown_timeout"`    // then let in-flight streams finish for at most this long
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"` // http.Server.ReadHeaderTimeout
	IdleTimeout       time.Duration `yaml:"idle_timeout"`        // http.Server.IdleTimeout (client keep-alive)
	MaxHeaderBytes    int           `yaml:"max_header_bytes"`    // http.Server.MaxHeaderBytes
	RequestIDHeader   string        `yaml:"request_id_header"`   // header read (or set) to correlate requests
}

// Upstream is one vLLM pod.
type Upstream struct {
	// Name labels metrics and logs; unique. Empty in the file means the
	// url's host:port.
	Name string `yaml:"name"`
	// URL is the pod's base URL: http or https, with a host, no query or
	// fragment. A path, if any, is prefixed to every proxied path.
	URL string `yaml:"url"`
	// MaxInflight is the largest window: set it to the pod's max_num_seqs.
	MaxInflight int `yaml:"max_inflight"`
	// MinInflight is the smallest window cuts go down to; ≤ MaxInflight.
	MinInflight int `yaml:"min_inflight"`
	// GPUs are the GPU ids (as nvml/dcgm/memory_blocks name them) serving this pod.
	GPUs []string `yaml:"gpus"`
	// Sources are read for this pod only.
	Sources []Source `yaml:"sources"`
}

// SourceKind names a kind of pressure source.
type SourceKind string

// The source kinds.
const (
	SourceNVML         SourceKind = "nvml"          // local GPUs through NVML; takes no url
	SourceVLLM         SourceKind = "vllm"          // a vLLM /metrics endpoint (per pod)
	SourceDCGM         SourceKind = "dcgm"          // a DCGM exporter /metrics endpoint
	SourceMemoryBlocks SourceKind = "memory_blocks" // an allocator endpoint (JSON memory_blocks)
)

// Source is one place pressure readings come from.
type Source struct {
	Kind SourceKind `yaml:"kind"`
	// URL is required for every kind but nvml, which must not have one.
	URL string `yaml:"url"`
	// Name labels the source in metrics; unique over the file. Empty in the
	// file means "nvml" for nvml and "kind:url" otherwise.
	Name string `yaml:"name"`
	// Timeout bounds one reading. 0 means derived from pressure.interval
	// (see TimeoutOr).
	Timeout time.Duration `yaml:"timeout"`
}

// TimeoutOr returns s.Timeout, or def when it is 0 (derived).
func (s Source) TimeoutOr(def time.Duration) time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return def
}

// Transport bounds the connections gatekeeper opens to upstreams.
type Transport struct {
	DialTimeout           time.Duration `yaml:"dial_timeout"`
	ResponseHeaderTimeout time.Duration `yaml:"response_header_timeout"`
	IdleConnTimeout       time.Duration `yaml:"idle_conn_timeout"`
	MaxIdleConnsPerHost   int           `yaml:"max_idle_conns_per_host"`
	TLSHandshakeTimeout   time.Duration `yaml:"tls_handshake_timeout"`
}

// HealthCheck is the active GET probe of every upstream.
type HealthCheck struct {
	Path           string        `yaml:"path"`
	Interval       time.Duration `yaml:"interval"`
	Timeout        time.Duration `yaml:"timeout"`
	UnhealthyAfter int           `yaml:"unhealthy_after"` // consecutive failed probes to mark it down
	HealthyAfter   int           `yaml:"healthy_after"`   // consecutive good probes to mark it up
}

// OnStale says what a stale or failing source means for the level.
type OnStale string

// The stale policies.
const (
	OnStaleDegrade OnStale = "degrade" // treat the upstream as degraded (the default)
	OnStaleHold    OnStale = "hold"    // keep the last level
	OnStaleIgnore  OnStale = "ignore"  // drop the stale signals
)

// Pressure is how GPU pressure is read and judged.
type Pressure struct {
	Interval   time.Duration `yaml:"interval"`
	StaleAfter time.Duration `yaml:"stale_after"`
	OnStale    OnStale       `yaml:"on_stale"`
	// Hysteresis is the margin, as a fraction of each threshold, by which a
	// value must fall below the threshold before its level is left: with
	// 0.05, a degrade threshold of 1.2 is left below 1.14. A fraction (not
	// an absolute margin) suits signals of every unit alike.
	Hysteresis float64       `yaml:"hysteresis"`
	Hold       time.Duration `yaml:"hold"` // how long the value must stay below before the level is left
	// Sources are node-level sources, matched to upstreams by GPU id.
	Sources []Source `yaml:"sources"`
	// Rules are the thresholds per signal, the file's rules merged over the
	// defaults; a signal absent from the map has no rule.
	Rules map[Signal]Rule `yaml:"rules"`
}

// Signal names a pressure signal.
type Signal string

// The signals a rule may name.
const (
	SignalFragmentation  Signal = "fragmentation"    // total free ÷ largest free block, ≥ 1
	SignalKVCacheUsage   Signal = "kv_cache_usage"   // vLLM KV-cache usage, 0–1
	SignalMemoryUsed     Signal = "memory_used"      // device memory used ÷ total, 0–1
	SignalPreemptionRate Signal = "preemption_rate"  // vLLM preemptions per second
	SignalWaiting        Signal = "waiting"          // requests waiting inside vLLM
	SignalAllocRetryRate Signal = "alloc_retry_rate" // allocator retries per second
)

// Signals returns every known signal, in a stable order.
func Signals() []Signal {
	return []Signal{SignalFragmentation, SignalKVCacheUsage, SignalMemoryUsed,
		SignalPreemptionRate, SignalWaiting, SignalAllocRetryRate}
}

// Rule holds one signal's thresholds. A nil threshold is not set: a rule
// without Shed only cuts the batch; one without Degrade goes straight to
// critical.
type Rule struct {
	Degrade *float64 `yaml:"degrade"`
	Shed    *float64 `yaml:"shed"`
}

// FastBreaker is the QPS limit.
type FastBreaker struct {
	QPS       float64    `yaml:"qps"`        // global; 0 turns the global limiter off
	Burst     int        `yaml:"burst"`      // 0 in the file: qps rounded up
	PerClient *PerClient `yaml:"per_client"` // nil: no per-client limit
}

// PerClient limits each client, keyed by a request header.
type PerClient struct {
	Header     string        `yaml:"header"`
	QPS        float64       `yaml:"qps"`
	Burst      int           `yaml:"burst"`       // 0 in the file: qps rounded up
	MaxClients int           `yaml:"max_clients"` // buckets kept at most; the idlest go first
	IdleAfter  time.Duration `yaml:"idle_after"`  // a bucket unused this long is dropped
}

// Batch is how the window is cut under pressure and ramped back.
type Batch struct {
	Cut       float64       `yaml:"cut"` // fraction of the window removed per cut
	CutEvery  time.Duration `yaml:"cut_every"`
	RampStep  float64       `yaml:"ramp_step"` // fraction of max_inflight added per RampEvery
	RampEvery time.Duration `yaml:"ramp_every"`
}

// Queue bounds the admission queue.
type Queue struct {
	MaxLength       int           `yaml:"max_length"`
	MaxTokens       int64         `yaml:"max_tokens"`
	MaxWait         time.Duration `yaml:"max_wait"`
	StarvationAfter time.Duration `yaml:"starvation_after"`
}

// Estimate turns a request into an estimated token count.
type Estimate struct {
	CharsPerToken    float64 `yaml:"chars_per_token"`
	DefaultMaxTokens int     `yaml:"default_max_tokens"` // completion tokens assumed when max_tokens is absent
}

// Shed is what a refused client is told.
type Shed struct {
	RetryAfter time.Duration `yaml:"retry_after"`
}

// UpstreamBreaker is the per-upstream error breaker.
type UpstreamBreaker struct {
	Failures         int           `yaml:"failures"` // consecutive failures that open it
	OpenFor          time.Duration `yaml:"open_for"`
	HalfOpenRequests int           `yaml:"half_open_requests"` // probes let through after OpenFor
}

// Hooks are relief calls made on entering a level; they never block traffic.
type Hooks struct {
	Degraded  []Hook `yaml:"degraded"`
	Critical  []Hook `yaml:"critical"`
	Recovered []Hook `yaml:"recovered"`
}

// Hook is one HTTP call.
type Hook struct {
	Method string `yaml:"method"`
	// URL is absolute (http/https), or a path starting with "/" that is
	// resolved against the URL of the upstream entering the level (see
	// ResolveURL).
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`
	Body    string            `yaml:"body"`
	Timeout time.Duration     `yaml:"timeout"`
}

// LogLevel is the least severe level logged.
type LogLevel string

// The log levels.
const (
	LogDebug LogLevel = "debug"
	LogInfo  LogLevel = "info"
	LogWarn  LogLevel = "warn"
	LogError LogLevel = "error"
)

// Slog returns the slog level; an unknown level reads as info.
func (l LogLevel) Slog() slog.Level {
	switch l {
	case LogDebug:
		return slog.LevelDebug
	case LogWarn:
		return slog.LevelWarn
	case LogError:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Log configures the process log.
type Log struct {
	Level LogLevel `yaml:"level"`
}
