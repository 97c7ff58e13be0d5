package pressure

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Settings configures a Monitor. The zero value, plus at least one source,
// selects the defaults.
type Settings struct {
	// Upstreams lists the upstreams and their own sources.
	Upstreams []UpstreamSettings
	// Sources lists node-level sources (nvml, dcgm): their per-GPU readings
	// belong to every upstream whose GPUs name the GPU's index or UUID.
	Sources []SourceSettings
	// Interval is how often each source is read. 0 means 500ms.
	Interval time.Duration
	// Jitter is the largest random change (±Jitter/2) applied to each wait,
	// so many gatekeepers do not scrape in step. 0 means Interval/10;
	// negative means none. Must be less than Interval.
	Jitter time.Duration
	// Timeout bounds one Read. 0 means 80% of Interval; must be less than
	// Interval.
	Timeout time.Duration
	// StaleAfter is how long after its last good reading a source (and its
	// values) is stale. 0 means 4 × Interval (2s by default); must be at
	// least Interval.
	StaleAfter time.Duration
	// Smoothing is the time constant of the exponentially weighted moving
	// average applied to the derived rates (preemption_rate,
	// alloc_retry_rate, fragmentation_growth). 0 means 5s.
	Smoothing time.Duration
	// HTTPClient performs the HTTP reads. Nil means a client of our own
	// with a 5s dial timeout (never http.DefaultClient); each read is
	// further bounded by Timeout.
	HTTPClient *http.Client
	// NVML is the NVML library the nvml source calls. Nil means
	// nvml.New(), the real driver library, loaded at the first read. Only
	// a build with the nvml build tag reads NVML (NVMLCompiled); without it
	// this stays nil and an nvml source fails with ErrNVMLNotCompiled.
	NVML NVML
	// Logger receives one line per source state change (down, up). Nil
	// means discard.
	Logger *slog.Logger
	// OnUpdate, if set, is called with a fresh Snapshot once per round:
	// after every source has reported (answered, failed or timed out)
	// since the last call, or StaleAfter after it when one has not; at once
	// after Notify; every Interval when there is no source. It runs on one
	// goroutine owned by Run (never concurrently with itself, never under a
	// lock); Notify calls made while one is pending are coalesced.
	OnUpdate func(State)
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
}

// UpstreamSettings names one upstream, the GPUs serving it and its sources.
type UpstreamSettings struct {
	// Name is the upstream's unique name.
	Name string
	// GPUs lists the GPU indexes ("0") or UUIDs ("GPU-…") serving the
	// upstream; node-level readings of other GPUs are ignored for it.
	GPUs []string
	// Sources lists the upstream's own sources (vllm, memory_blocks). All
	// their readings belong to the upstream, whatever GPU ID they carry.
	Sources []SourceSettings
}

// SourceSettings configures one source.
type SourceSettings struct {
	// Kind selects a built-in source. Ignored when Source is set, except as
	// the Kind reported in State.
	Kind Kind
	// URL is what an HTTP source reads (vllm, dcgm, memory_blocks).
	URL string
	// Name overrides the source's name. Empty means the kind for a node
	// source and "upstream/kind" for an upstream's, with "#2", "#3"… added
	// to repeats.
	Name string
	// Source, if set, is used instead of a built-in one (tests, embedding).
	Source Source
	// Timeout bounds one Read of this source. 0 means Settings.Timeout; a
	// longer one delays only this source's next reading, never another's.
	Timeout time.Duration
}

const (
	defaultInterval  = 500 * time.Millisecond
	defaultSmoothing = 5 * time.Second
)

// withDefaults returns s with zero fields replaced by their defaults, or an
// error naming every invalid field.
func (s Settings) withDefaults() (Settings, error) {
	if s.Interval == 0 {
		s.Interval = defaultInterval
	}
	if s.Jitter == 0 {
		s.Jitter = s.Interval / 10
	}
	if s.Timeout == 0 {
		s.Timeout = s.Interval * 8 / 10
	}
	if s.StaleAfter == 0 {
		s.StaleAfter = 4 * s.Interval
	}
	if s.Smoothing == 0 {
		s.Smoothing = defaultSmoothing
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if s.Interval < 0 {
		errs = append(errs, fmt.Errorf("pressure: interval %v: must be positive", s.Interval))
	}
	if s.Jitter >= s.Interval && s.Interval > 0 {
		errs = append(errs, fmt.Errorf("pressure: jitter %v: must be less than interval %v", s.Jitter, s.Interval))
	}
	if s.Timeout < 0 || s.Timeout >= s.Interval {
		errs = append(errs, fmt.Errorf("pressure: timeout %v: must be positive and less than interval %v", s.Timeout, s.Interval))
	}
	if s.StaleAfter < s.Interval {
		errs = append(errs, fmt.Errorf("pressure: stale_after %v: must be at least interval %v", s.StaleAfter, s.Interval))
	}
	if s.Smoothing < 0 {
		errs = append(errs, fmt.Errorf("pressure: smoothing %v: must be positive", s.Smoothing))
	}
	if s.Jitter < 0 {
		s.Jitter = 0
	}
	return s, errors.Join(errs...)
}
