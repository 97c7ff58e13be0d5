package config

import (
	"cmp"
	_ "embed"
	"fmt"
	"math"
	"net/url"
	"time"
)

// defaultYAML is the annotated default policy; the repository's root
// config.yaml is a byte-for-byte copy of it.
//
//go:embed default.yaml
var defaultYAML []byte

// DefaultYAML returns the annotated default policy file, as embedded.
func DefaultYAML() []byte {
	return append([]byte(nil), defaultYAML...)
}

// Default returns the annotated default policy (default.yaml), decoded and
// validated. Each call returns a new Config.
func Default() *Config {
	c, err := Parse(defaultYAML)
	if err != nil {
		// default.yaml is compiled in and tested; this is a build mistake.
		panic(fmt.Sprintf("config: embedded default.yaml is invalid: %v", err))
	}
	return c
}

// builtin returns the values a key takes when the file leaves it out.
// Upstreams, sources and hooks are lists and start empty; each element gets
// its own defaults from its setDefaults method as it is decoded.
func builtin() *Config {
	f := func(v float64) *float64 { return &v }
	return &Config{
		Mode: ModeEnforce,
		Server: Server{
			Listen:               ":8080",
			AdminListen:          "127.0.0.1:9090",
			MaxBodyBytes:         10 << 20,
			DrainDelay:           5 * time.Second,
			ShutdownTimeout:      30 * time.Second,
			ReadHeaderTimeout:    10 * time.Second,
			IdleTimeout:          120 * time.Second,
			SendTimeout:          60 * time.Second,
			MaxHeaderBytes:       1 << 20,
			RequestIDHeader:      "X-Request-Id",
			Pprof:                false,
			MaxConcurrentStreams: 250,
			MaxConnections:       10000,
			// Overload off: measured on a shared machine, shedding on the
			// scheduler's delay cut goodput when other processes took the
			// CPU (bench/README.md, "Past saturation").
			Overload: Overload{},
			// Streams leave net/http's goroutine after their first event
			// (bench/README.md, "Handing a stream off").
			StreamHandoff: true,
		},
		Transport: Transport{
			DialTimeout:           2 * time.Second,
			ResponseHeaderTimeout: 10 * time.Minute,
			IdleConnTimeout:       4 * time.Second,
			MaxIdleConnsPerHost:   256,
			TLSHandshakeTimeout:   5 * time.Second,
		},
		HealthCheck: HealthCheck{
			Path:           "/health",
			Interval:       5 * time.Second,
			Timeout:        2 * time.Second,
			UnhealthyAfter: 2,
			HealthyAfter:   1,
		},
		Pressure: Pressure{
			Interval:   500 * time.Millisecond,
			StaleAfter: 2 * time.Second,
			OnStale:    OnStaleDegrade,
			Hysteresis: 0.05,
			Hold:       5 * time.Second,
			Rules: map[Signal]Rule{
				signalFragmentation:  {Degrade: f(1.2), Shed: f(1.5), For: 2 * time.Second},
				signalKVCacheUsage:   {Degrade: f(0.95)},
				signalAllocRetryRate: {Degrade: f(0.01)},
			},
		},
		FastBreaker: FastBreaker{QPS: 80, Burst: 40},
		Batch:       Batch{Cut: 0.2, CutEvery: 2 * time.Second, WorseBy: 0.01, RampStep: 0.1, RampEvery: time.Second, MemoryShare: 0.6},
		Queue: Queue{MaxLength: 1024, MaxTokens: 4_000_000, MaxWait: 30 * time.Second, StarvationAfter: 10 * time.Second,
			Order: OrderShortestFirst, TTFTDeadline: 1500 * time.Millisecond, DeadlineHeader: "X-SLO-TTFT-Ms"},
		Routing:         Routing{Scorers: Scorers{Prefix: 1, Load: 2, KVCache: 2, Memory: 2}, PrefixCapacityBlocks: 16384},
		Estimate:        Estimate{CharsPerToken: 4, DefaultMaxTokens: 256, BytesPerLogit: 32, PromptLogprobsChunk: 8192},
		Shed:            Shed{RetryAfter: 2 * time.Second},
		UpstreamBreaker: UpstreamBreaker{Failures: 5, OpenFor: 10 * time.Second, HalfOpenRequests: 2},
		Log:             Log{Level: logInfo},
	}
}

// defaulter is implemented by list elements and optional sections whose
// keys have defaults; the decoder calls it on each new element.
type defaulter interface{ setDefaults() }

func (u *Upstream) setDefaults() { u.MaxInflight, u.MinInflight = 256, 4 }

func (h *Hook) setDefaults() { h.Method, h.Timeout = "POST", 5*time.Second }

func (p *PerClient) setDefaults() { p.MaxClients, p.IdleAfter = 10000, 10*time.Minute }

// fillDerived sets the defaults that depend on other values: upstream and
// source names, and a min_inflight the file left out that would exceed
// max_inflight.
func (c *Config) fillDerived() {
	for i := range c.Upstreams {
		u := &c.Upstreams[i]
		if u.InferencePool != nil && u.URL == "" {
			u.URL = poolURL()
		}
		if u.Name == "" && u.InferencePool != nil {
			u.Name = u.InferencePool.Name
		}
		if u.Name == "" {
			if p, err := url.Parse(u.URL); err == nil {
				u.Name = p.Host
			}
		}
		_, setMin := c.lines[fmt.Sprintf("upstreams[%d].min_inflight", i)]
		if !setMin && u.MinInflight > u.MaxInflight && u.MaxInflight > 0 {
			u.MinInflight = u.MaxInflight
		}
		for j := range u.Sources {
			u.Sources[j].deriveName()
		}
	}
	for j := range c.Pressure.Sources {
		c.Pressure.Sources[j].deriveName()
	}
	if e := c.EndpointPicker; e != nil {
		e.Listen = cmp.Or(e.Listen, DefaultPickerListen)
		e.HealthListen = cmp.Or(e.HealthListen, defaultPickerHealthListen)
	}
	if f := &c.FastBreaker; f.Burst == 0 {
		f.Burst = secondsWorth(f.QPS)
	}
	if p := c.FastBreaker.PerClient; p != nil && p.Burst == 0 {
		p.Burst = secondsWorth(p.QPS)
	}
	if c.Classes != nil {
		c.Classes.fillDerived()
	}
	for name, l := range c.ModelLimits {
		if l.Burst == 0 {
			l.Burst = secondsWorth(l.QPS)
			c.ModelLimits[name] = l
		}
	}
	for sig, r := range c.Pressure.Rules {
		if r.Degrade == nil && r.Shed == nil && r.Horizon == 0 && r.For == 0 {
			delete(c.Pressure.Rules, sig) // `{}` disables the signal's rule, like null
		}
	}
}

// secondsWorth is the burst that lets one second's worth of requests
// through at once: qps rounded up, at least 1 (0 when qps is not positive).
func secondsWorth(qps float64) int {
	if !(qps > 0) || qps > 1e9 {
		return 0
	}
	return max(1, int(math.Ceil(qps)))
}

func (s *Source) deriveName() {
	switch {
	case s.Name != "":
	case s.Kind == SourceNVML:
		s.Name = string(SourceNVML)
	case s.URL != "":
		s.Name = string(s.Kind) + ":" + s.URL
	}
}
