package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

func (s HealthSettings) withDefaults() HealthSettings {
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

// Run runs the active health check until ctx ends: every interval, GET the
// health path of each pod at once. It returns after its goroutines exit.
func (h *Handler) Run(ctx context.Context) error {
	s := h.opts.Health.withDefaults()
	if s.Interval < 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		h.CheckAll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// CheckAll runs one round of the active health check now, every pod at
// once, and returns when it is done (Run calls it every interval; a test
// calls it to act at an exact moment). It also reads the models of pods that
// discover them.
func (h *Handler) CheckAll(ctx context.Context) {
	s := h.opts.Health.withDefaults()
	client := &http.Client{Transport: h.rp.Transport, Timeout: s.Timeout}
	var wg sync.WaitGroup
	for _, m := range h.pool.list() {
		wg.Go(func() { h.checkOne(ctx, client, s, m) })
	}
	wg.Wait()
	// Availability is read at dispatch: look again now, so a pod whose
	// error breaker's open time has passed takes its waiters.
	h.opts.Admission.Dispatch()
}

// checkOne probes one pod and flips its health after enough consecutive
// results, logging once per change.
func (h *Handler) checkOne(ctx context.Context, c *http.Client, s HealthSettings, m *member) {
	ok := probe(ctx, c, m.URL.JoinPath(s.Path).String())
	if ctx.Err() != nil {
		return
	}
	if ok && m.DiscoverModels {
		h.discoverModels(ctx, c, m)
	}
	h.metrics.health(m.Name, ok)
	var flip bool
	if ok {
		m.healthFails.Store(0)
		flip = m.healthOKs.Add(1) >= int32(s.HealthyAfter) && !m.healthy.Swap(true)
	} else {
		m.healthOKs.Store(0)
		flip = m.healthFails.Add(1) >= int32(s.UnhealthyAfter) && m.healthy.Swap(false)
	}
	if !flip {
		return
	}
	h.opts.Admission.Dispatch() // waiters: dispatched to it, or refused if no pod is left
	level, state := slog.LevelInfo, "healthy"
	if !ok {
		level, state = slog.LevelWarn, "unhealthy"
	}
	h.log.LogAttrs(ctx, level, "upstream health changed", slog.String("upstream", m.Name), slog.String("state", state))
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
