// Package healthcheck is the active health check of the pod registry: every
// interval it GETs each pod's health path (and, for pods that discover their
// models, GET /v1/models) and reports what it saw into the registry. It is
// the registry's only I/O. cmd/gatekeeper runs one for either front (Run,
// with its context), over the pooled transport it hands the proxy too; a
// health flip republishes the pod's availability (pods.Member.ReportHealth)
// and asks the queue to dispatch again.
package healthcheck

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
)

// Settings configures the check (GET Path on each pod).
type Settings struct {
	// Path is requested on each pod [/health].
	Path string
	// Interval between checks [5s]; negative disables the check.
	Interval time.Duration
	// Timeout of one check [2s].
	Timeout time.Duration
	// UnhealthyAfter consecutive failures mark a pod unhealthy [2].
	UnhealthyAfter int
	// HealthyAfter consecutive successes mark it healthy again [1].
	HealthyAfter int
}

func (s Settings) withDefaults() Settings {
	if s.Path == "" {
		s.Path = "/health"
	}
	if s.Interval == 0 {
		s.Interval = 5 * time.Second
	}
	if s.Timeout <= 0 {
		s.Timeout = 2 * time.Second
	}
	if s.UnhealthyAfter <= 0 {
		s.UnhealthyAfter = 2
	}
	if s.HealthyAfter <= 0 {
		s.HealthyAfter = 1
	}
	return s
}

// Checker runs the check over a registry's pods.
type Checker struct {
	Registry  *pods.Registry
	Settings  Settings
	Transport http.RoundTripper // the pods' pooled transport
	// Observed, if set, is called with every check's result (metrics).
	Observed func(pod string, ok bool)
	// Dispatch is called after every round and every flip: availability is
	// read at dispatch, so the queue must look again (a pod back, or one
	// whose error breaker's open time has passed, takes its waiters; a pod
	// gone fails the waiters no other pod can take).
	Dispatch func()
	// Recovered, if set, hears that a pod's health came back after it was
	// down: it may have restarted, its caches empty (the pod scorer forgets
	// what it sent there).
	Recovered func(pod string)
	Logger    *slog.Logger
}

// Run runs the check until ctx ends: every interval, every pod at once. It
// returns after its goroutines exit.
func (c *Checker) Run(ctx context.Context) error {
	s := c.Settings.withDefaults()
	if s.Interval < 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		c.CheckAll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// CheckAll runs one round now, every pod at once, and returns when it is
// done (Run calls it every interval; a test calls it to act at an exact
// moment).
func (c *Checker) CheckAll(ctx context.Context) {
	s := c.Settings.withDefaults()
	client := &http.Client{Transport: c.Transport, Timeout: s.Timeout}
	var wg sync.WaitGroup
	for _, m := range c.Registry.List() {
		wg.Go(func() { c.checkOne(ctx, client, s, m) })
	}
	wg.Wait()
	c.dispatch()
}

func (c *Checker) dispatch() {
	if c.Dispatch != nil {
		c.Dispatch()
	}
}

// checkOne probes one pod and flips its health after enough consecutive
// results, logging once per change.
func (c *Checker) checkOne(ctx context.Context, hc *http.Client, s Settings, m *pods.Member) {
	ok := probe(ctx, hc, m.URL.JoinPath(s.Path).String())
	if ctx.Err() != nil {
		return
	}
	if ok && m.DiscoverModels {
		if entries := discoverModels(ctx, hc, m); entries != nil {
			m.SetDiscovered(entries)
		}
	}
	if c.Observed != nil {
		c.Observed(m.Name, ok)
	}
	if !m.ReportHealth(ok, s.HealthyAfter, s.UnhealthyAfter) {
		return
	}
	if ok && c.Recovered != nil {
		c.Recovered(m.Name)
	}
	c.dispatch()
	level, state := slog.LevelInfo, "healthy"
	if !ok {
		level, state = slog.LevelWarn, "unhealthy"
	}
	if c.Logger != nil {
		c.Logger.LogAttrs(ctx, level, "upstream health changed", slog.String("upstream", m.Name), slog.String("state", state))
	}
}

// probe reports whether GET url answers 2xx.
func probe(ctx context.Context, c *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	res, err := c.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.CopyN(io.Discard, res.Body, 64<<10)
	_ = res.Body.Close()
	return res.StatusCode >= 200 && res.StatusCode < 300
}

// modelsLimit bounds a pod's GET /v1/models answer.
const modelsLimit = 1 << 20

// discoverModels reads m's own GET /v1/models; nil when the answer failed
// or is malformed (m keeps what it had).
func discoverModels(ctx context.Context, c *http.Client, m *pods.Member) []json.RawMessage {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.URL.JoinPath("/v1/models").String(), nil)
	if err != nil {
		return nil
	}
	res, err := c.Do(req)
	if err != nil {
		return nil
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, modelsLimit+1))
	if err != nil || res.StatusCode != http.StatusOK || len(b) > modelsLimit {
		return nil
	}
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if json.Unmarshal(b, &list) != nil || len(list.Data) == 0 {
		return nil
	}
	return list.Data
}
