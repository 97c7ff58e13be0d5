package config

import "time"

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
	// Routing chooses the pod among those with room (pod scoring,
	// docs/routing.md): each pod's score is the weighted mean of four
	// scorers, on wherever a request may go to more than one pod; every
	// weight 0 turns it off (the pod with the most free window).
	Routing Routing `yaml:"routing"`
	// Estimate turns a request body into an estimated token count.
	Estimate Estimate `yaml:"estimate"`
	// Shed is what a refused client is told.
	Shed Shed `yaml:"shed"`
	// UpstreamBreaker is the per-upstream error breaker.
	UpstreamBreaker UpstreamBreaker `yaml:"upstream_breaker"`
	// Hooks are the relief calls made on entering a level.
	Hooks Hooks `yaml:"hooks"`
	// Classes, if set, are the traffic classes (nil: every request alike).
	Classes *Classes `yaml:"classes"`
	// ModelLimits are optional token buckets per model (the body's "model").
	ModelLimits map[string]ModelLimit `yaml:"model_limits"`
	// Fairness, if set, shares the queue between tenants within a class
	// (nil: the queue's order alone).
	Fairness *Fairness `yaml:"fairness"`
	// Quotas, if set, are token quotas per minute and per day, per client
	// key, class and model (nil: none).
	Quotas *Quotas `yaml:"quotas"`
	// Cluster, if set, shares limits and windows with the other replicas
	// through Redis (nil: this replica decides alone).
	Cluster *Cluster `yaml:"cluster"`
	// EndpointPicker, if set, runs gatekeeper as the Gateway API Inference
	// Extension's endpoint picker (Envoy ext_proc) instead of the HTTP proxy.
	EndpointPicker *EndpointPicker `yaml:"endpoint_picker"`
	// Tracing, if set, exports OpenTelemetry traces over OTLP (nil: no
	// spans).
	Tracing *Tracing `yaml:"tracing"`
	// Scaling, if set, exports a scaling signal with a forecast
	// (gatekeeper_desired_replicas, /admin/scale; nil: none).
	Scaling *Scaling `yaml:"scaling"`
	// Log configures the process log.
	Log Log `yaml:"log"`

	// lines maps a key path ("upstreams[1].url") to its line in the file it
	// was decoded from; nil for a Config built in code.
	lines map[string]int
}

// Server configures the traffic and admin listeners.
type Server struct {
	Listen      string `yaml:"listen"`       // traffic, /healthz, /readyz; host:port
	AdminListen string `yaml:"admin_listen"` // /metrics, /admin/state; host:port
	// MaxBodyBytes bounds a request body: a larger one gets 413, at once
	// when its Content-Length says so. What the client still sends is then
	// read and thrown away until the body ends, for at most 30 s and 5 s
	// without a byte (nginx's lingering close), so that it can read the 413.
	MaxBodyBytes      int64         `yaml:"max_body_bytes"`
	DrainDelay        time.Duration `yaml:"drain_delay"`         // SIGTERM: keep serving this long after /readyz turns 503
	ShutdownTimeout   time.Duration `yaml:"shutdown_timeout"`    // then let in-flight streams finish for at most this long
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"` // http.Server.ReadHeaderTimeout
	IdleTimeout       time.Duration `yaml:"idle_timeout"`        // http.Server.IdleTimeout (client keep-alive); a proxy in front must close idle connections sooner
	// SendTimeout cuts an answer (a token stream above all) whose client
	// has taken no byte of it for this long: its pod request is cancelled
	// and its slot freed (nginx's send_timeout). A client that reads slowly
	// is served while it takes bytes; over TCP it is seen to take them when
	// its receive window opens, a segment (1.4 KiB) or more at a time, so a
	// reader slower than that per send_timeout looks stopped. On HTTP/2
	// each write must end within it instead, and a connection that takes
	// no byte for the send_timeout gatekeeper started with is closed.
	// 0: none.
	SendTimeout     time.Duration `yaml:"send_timeout"`
	MaxHeaderBytes  int           `yaml:"max_header_bytes"`  // http.Server.MaxHeaderBytes
	RequestIDHeader string        `yaml:"request_id_header"` // header read (or set) to correlate requests
	Pprof           bool          `yaml:"pprof"`             // serve net/http/pprof under /debug/pprof/ on the admin listener
	// AdminTokenFile, if set, names a file whose content (trimmed) is the
	// bearer token every admin request must carry; read at start and reload.
	AdminTokenFile string `yaml:"admin_token_file"`
	// MaxConcurrentStreams caps HTTP/2 streams per client connection.
	MaxConcurrentStreams int `yaml:"max_concurrent_streams"`
	// MaxConnections is the most client connections the traffic listener
	// holds at once (TLS or plain); beyond it new connections wait in the
	// kernel's accept backlog until one closes. 0: no limit. Needs a restart.
	MaxConnections int `yaml:"max_connections"`
	// TLS, if set, serves the traffic listener over TLS with HTTP/2.
	TLS *TLS `yaml:"tls"`
	// H2C serves plaintext HTTP/2 with prior knowledge (h2c) on the traffic
	// listener beside HTTP/1.1, for a gateway that speaks HTTP/2 to its
	// backends: its requests share a few connections instead of one each.
	// Not with TLS, where HTTP/2 is negotiated. Needs a restart.
	H2C bool `yaml:"h2c"`
	// Overload sheds new requests while gatekeeper itself is saturated.
	Overload Overload `yaml:"overload"`
	// StreamHandoff relays a plain-text HTTP/1.1 token stream, once its
	// first event is out, on a goroutine of gatekeeper's own instead of
	// net/http's server, which frees about a third of what an open stream
	// costs; after the stream the connection goes back to the server for
	// the client's next request. TLS and HTTP/2 streams stay on net/http.
	// Needs a restart.
	StreamHandoff bool `yaml:"stream_handoff"`
}

// Overload is gatekeeper's guard against its own saturation (package
// overload): a request it sheds is refused at once, before its body is
// read, with 503, Retry-After and reason gateway_overloaded, in either mode
// (observe too: it guards gatekeeper, not the pods). Needs a restart.
type Overload struct {
	// SchedDelay is the Go scheduler's delay gatekeeper holds itself to (the
	// 90th percentile of how long its goroutines waited to run, over 50 ms;
	// the lower of the last two intervals): above it a growing share of new
	// requests is shed, below it a shrinking one. 0: not watched; else at
	// least 100µs.
	SchedDelay time.Duration `yaml:"sched_delay"`
	// MaxInflight sheds a request that would make more than this many in
	// flight through the traffic listener at once (streams included).
	// 0: no bound.
	MaxInflight int `yaml:"max_inflight"`
}

// TLS names the traffic listener's certificate and key (PEM). Both files
// are re-read when they change, so a rotated certificate needs no restart.
type TLS struct {
	CertFile string `yaml:"cert_file"` // the certificate chain, PEM
	KeyFile  string `yaml:"key_file"`  // its private key, PEM
}

// Upstream is one vLLM pod.
type Upstream struct {
	// Name labels metrics and logs; unique. Empty in the file means the
	// url's host:port.
	Name string `yaml:"name"`
	// URL is the pod's base URL: http or https, with a host, no query or
	// fragment. A path, if any, is prefixed to every proxied path.
	URL string `yaml:"url"`
	// MaxInflight is the largest window: at most the pod's max_num_seqs,
	// and better the most sequences the pod serves within the
	// time-to-first-token target, found by a load test.
	MaxInflight int `yaml:"max_inflight"`
	// MinInflight is the smallest window cuts go down to; ≤ MaxInflight.
	MinInflight int `yaml:"min_inflight"`
	// GPUs are the GPU ids (as nvml/dcgm/memory_blocks name them) serving this pod.
	GPUs []string `yaml:"gpus"`
	// Sources are read for this pod only.
	Sources []Source `yaml:"sources"`
	// DNSInterval, when above 0, re-resolves the URL's host this often and
	// turns the entry into one upstream per address (a Kubernetes headless
	// Service): pods that come and go are picked up without a restart.
	DNSInterval time.Duration `yaml:"dns_interval"`
	// InferencePool, if set, makes the entry stand for every ready pod of
	// that InferencePool, one upstream per pod and target port (named
	// NAME/IP:PORT), watched through the Kubernetes API. url is then
	// optional ("http://pod"): its host, and the host of sources on the same
	// host, is each pod's IP; its port each of the pool's targetPorts.
	InferencePool *InferencePool `yaml:"inference_pool"`
	// Models are the models the pod serves (the request body's "model"); a
	// request goes only to pods that serve its model. Empty: every model,
	// unless DiscoverModels.
	Models []string `yaml:"models"`
	// DiscoverModels reads the pod's own GET /v1/models at every health
	// check and routes by what it lists (Models until the first answer).
	DiscoverModels bool `yaml:"discover_models"`
	// Rules override pressure.rules for this pod, signal by signal (the
	// same merge as over the defaults): a pool of pods that serve a large
	// model can run tighter rules.
	Rules map[Signal]Rule `yaml:"rules"`
	// ForwardPriority adds the request's class to the body it forwards as
	// vLLM's "priority" field (minus the class priority: vLLM serves lower
	// values first; needs --scheduling-policy priority), unless the client
	// set one. Off by default.
	ForwardPriority bool `yaml:"forward_priority"`
	// VocabSize is the served model's vocabulary size (e.g. 128256 for
	// Llama 3). Above 0 it turns on memory admission for the pod: the
	// in-flight requests' estimated sampler and prompt-logprob memory
	// stays within batch.memory_share of the free memory its memory_blocks
	// source reports. 0: off.
	VocabSize int64 `yaml:"vocab_size"`
	// MaxInflightTokens, above 0, is the token-budget window: the estimated
	// tokens (prompt + max output) in flight to the pod at most, cut and
	// ramped with the request window. 0: off.
	MaxInflightTokens int64 `yaml:"max_inflight_tokens"`
}

// Source is one place pressure readings come from.
type Source struct {
	Kind SourceKind `yaml:"kind"` // what is read and how
	// URL is required for every kind but nvml, which must not have one.
	URL string `yaml:"url"`
	// Name labels the source in metrics; unique over the file. Empty in the
	// file means "nvml" for nvml and "kind:url" otherwise.
	Name string `yaml:"name"`
	// Timeout bounds one reading. 0 means derived from pressure.interval
	// (see TimeoutOr).
	Timeout time.Duration `yaml:"timeout"`
}

// timeoutOr returns s.Timeout, or def when it is 0 (derived).
func (s Source) timeoutOr(def time.Duration) time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return def
}

// Transport bounds the connections gatekeeper opens to upstreams: it
// configures gatekeeper's pod transport (podconn.Transport) and the
// http.Transport behind it for https pods (TLSHandshakeTimeout is that
// one's alone).
type Transport struct {
	DialTimeout time.Duration `yaml:"dial_timeout"` // net.Dialer.Timeout
	// ResponseHeaderTimeout bounds the wait for response headers; a
	// non-streaming completion sends them only when it is done.
	ResponseHeaderTimeout time.Duration `yaml:"response_header_timeout"`
	// IdleConnTimeout must stay below the upstream's keep-alive (uvicorn: 5s).
	IdleConnTimeout     time.Duration `yaml:"idle_conn_timeout"`
	MaxIdleConnsPerHost int           `yaml:"max_idle_conns_per_host"` // idle connections kept per pod; raised to each pod's max_inflight, so a full window's connections are reused
	TLSHandshakeTimeout time.Duration `yaml:"tls_handshake_timeout"`   // of one TLS handshake with a pod
}

// HealthCheck is the active GET probe of every upstream.
type HealthCheck struct {
	Path           string        `yaml:"path"`            // probed with GET; starts with /
	Interval       time.Duration `yaml:"interval"`        // between probes of one upstream
	Timeout        time.Duration `yaml:"timeout"`         // of one probe; ≤ Interval
	UnhealthyAfter int           `yaml:"unhealthy_after"` // consecutive failed probes to mark it down
	HealthyAfter   int           `yaml:"healthy_after"`   // consecutive good probes to mark it up
}

// Pressure is how GPU pressure is read and judged.
type Pressure struct {
	Interval   time.Duration `yaml:"interval"`    // between readings of every source
	StaleAfter time.Duration `yaml:"stale_after"` // without a good reading: stale; > Interval
	OnStale    OnStale       `yaml:"on_stale"`    // what a stale or failing source means: degrade the pod, hold its level, or ignore the signal
	// Hysteresis is the margin, as a fraction of each threshold, by which a
	// value must fall below the threshold before its level is left: with
	// 0.05, a degrade threshold of 1.2 is left below 1.14. A fraction (not
	// an absolute margin) suits signals of every unit alike.
	Hysteresis float64       `yaml:"hysteresis"`
	Hold       time.Duration `yaml:"hold"` // how long the value must stay below before the level is left
	// Sources are node-level sources, matched to upstreams by GPU id.
	Sources []Source `yaml:"sources"`
	// Rules are the thresholds per signal, the file's rules merged over the
	// defaults (a rule replaces its signal's default rule whole; {} or null
	// removes it); a signal absent from the map has no rule. docs/signals.md
	// lists every signal with its unit, sources and default rule.
	Rules map[Signal]Rule `yaml:"rules"`
}

// Rule holds one signal's thresholds. A nil threshold is not set: a rule
// without Shed only cuts the batch; one without Degrade goes straight to
// critical.
type Rule struct {
	Degrade *float64 `yaml:"degrade"` // value ≥ Degrade: degraded (the window is cut)
	Shed    *float64 `yaml:"shed"`    // value ≥ Shed: critical (new work refused); > Degrade
	// Horizon, above 0, judges the value projected this far ahead along its
	// rise since the previous reading (a trend rule); 0: the value as read.
	Horizon time.Duration `yaml:"horizon"`
	// For, above 0, is how long the value must reach a threshold, on every
	// reading, before the level rises to it; 0: the first reading.
	For time.Duration `yaml:"for"`
}

// FastBreaker is the QPS limit.
type FastBreaker struct {
	QPS       float64    `yaml:"qps"`        // global; 0 turns the global limiter off
	Burst     int        `yaml:"burst"`      // 0 in the file: qps rounded up
	PerClient *PerClient `yaml:"per_client"` // nil: no per-client limit
}

// PerClient limits each client, keyed by a request header.
type PerClient struct {
	Header     string        `yaml:"header"`      // its value keys the client; absent: global limit only
	QPS        float64       `yaml:"qps"`         // per client; > 0
	Burst      int           `yaml:"burst"`       // 0 in the file: qps rounded up
	MaxClients int           `yaml:"max_clients"` // buckets kept at most; the idlest go first
	IdleAfter  time.Duration `yaml:"idle_after"`  // a bucket unused this long is dropped
}

// Batch is how the window is cut under pressure and ramped back.
type Batch struct {
	Cut       float64       `yaml:"cut"`        // fraction of the window removed per cut; 0 < Cut < 1
	CutEvery  time.Duration `yaml:"cut_every"`  // between cuts while degraded and worsening
	WorseBy   float64       `yaml:"worse_by"`   // rise since the last cut, as a fraction of the value then, that counts as worsening; 0 < WorseBy < 1
	RampStep  float64       `yaml:"ramp_step"`  // fraction of max_inflight added per RampEvery; 0 < RampStep ≤ 1
	RampEvery time.Duration `yaml:"ramp_every"` // between ramp steps once normal
	// FailureHold is how long a pod's window stays capped after it failed
	// under load (its error breaker opened while it ran at least half its
	// window): the cap is what a cut leaves of the sequences it was
	// running. 0: for as long as gatekeeper runs, or until a reload changes
	// the pod's max_inflight.
	FailureHold time.Duration `yaml:"failure_hold"`
	// MemoryShare is the fraction of a pod's reported free memory that the
	// in-flight requests' estimated memory may take (upstreams[].vocab_size
	// turns it on); 0 < MemoryShare ≤ 1.
	MemoryShare float64 `yaml:"memory_share"`
}

// Queue bounds the admission queue.
type Queue struct {
	MaxLength int   `yaml:"max_length"` // waiting requests, at most
	MaxTokens int64 `yaml:"max_tokens"` // estimated tokens waiting, at most
	// MaxWait is the longest a request waits for a slot before 503
	// queue_timeout. A request whose time-to-first-token deadline is shorter
	// (ttft_deadline, 1500ms unless set, or its class's) is answered 503
	// deadline by then and never waits this long: raising max_wait alone
	// makes no request wait longer; lower or turn off (0s) ttft_deadline
	// too. gatekeeper -check warns when a file sets max_wait above a
	// default deadline it leaves out.
	MaxWait         time.Duration `yaml:"max_wait"`
	StarvationAfter time.Duration `yaml:"starvation_after"` // shortest-first ages a waiter this old to the front; < MaxWait
	// Order is how waiters of one priority leave: shortest_first (by
	// arrival while every pod it may use is normal, shortest first while
	// one is degraded, critical or recovering) or earliest_deadline (the
	// earliest time-to-first-token deadline first, always).
	Order QueueOrder `yaml:"order"`
	// TTFTDeadline is a request's time-to-first-token deadline when its
	// class sets none: a waiter that cannot start by then, judged from the
	// pod's service rate and the work ahead of it, gets 503 deadline with
	// Retry-After at once instead of waiting out max_wait. 0: none (max_wait
	// alone); a deadline at or above max_wait is max_wait. Below max_wait
	// it is what bounds the wait, the default included: a file that sets
	// max_wait: 60s and no ttft_deadline still answers by 1500ms.
	TTFTDeadline time.Duration `yaml:"ttft_deadline"`
	// DeadlineHeader names a request header in which a client may tighten
	// its own deadline, in milliseconds (llm-d's x-slo-ttft-ms); a value
	// above the class's deadline or not a positive integer is ignored.
	// Empty: clients cannot.
	DeadlineHeader string `yaml:"deadline_header"`
}

// Estimate turns a request into an estimated token count.
type Estimate struct {
	CharsPerToken    float64 `yaml:"chars_per_token"`    // prompt characters per estimated token
	DefaultMaxTokens int     `yaml:"default_max_tokens"` // completion tokens assumed when max_tokens is absent
	// BytesPerLogit is the memory one sampled sequence needs per vocabulary
	// entry during an engine step (the sampler's logits, probabilities and
	// draw; the top-p/top-k sort's buffers on releases before vLLM 0.21):
	// the unit of memory admission.
	BytesPerLogit int `yaml:"bytes_per_logit"`
	// PromptLogprobsChunk is the most prompt tokens whose logits one
	// prompt_logprobs request holds at once: vLLM computes them one
	// scheduler chunk (max_num_batched_tokens) at a time.
	PromptLogprobsChunk int `yaml:"prompt_logprobs_chunk"`
}

// Shed is what a refused client is told.
type Shed struct {
	RetryAfter time.Duration `yaml:"retry_after"` // Retry-After of a 503 refusal; ≥ 1s
}

// UpstreamBreaker is the per-upstream error breaker.
type UpstreamBreaker struct {
	Failures         int           `yaml:"failures"`           // consecutive failures that open it
	OpenFor          time.Duration `yaml:"open_for"`           // how long an open breaker skips the upstream
	HalfOpenRequests int           `yaml:"half_open_requests"` // probes let through after OpenFor
}

// Hooks are relief calls made on entering a level; they never block traffic.
type Hooks struct {
	Degraded  []Hook `yaml:"degraded"`  // on entering degraded
	Critical  []Hook `yaml:"critical"`  // on entering critical
	Recovered []Hook `yaml:"recovered"` // on returning to normal
}

// Hook is one HTTP call.
type Hook struct {
	Method string `yaml:"method"` // GET, POST (the default), PUT, PATCH or DELETE
	// URL is absolute (http/https), or a path starting with "/" that is
	// resolved against the URL of the upstream entering the level (see
	// ResolveURL).
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers" log:"redact"` // added to the request; may carry credentials, so never logged
	Body    string            `yaml:"body" log:"redact"`    // sent as is; never logged
	Timeout time.Duration     `yaml:"timeout"`              // of the whole call
}

// Log configures the process log.
type Log struct {
	Level LogLevel `yaml:"level"` // least severe level logged
}

// ModelLimit is one model's own token bucket.
type ModelLimit struct {
	QPS   float64 `yaml:"qps"`   // > 0
	Burst int     `yaml:"burst"` // 0: qps rounded up
}
