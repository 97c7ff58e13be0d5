package load

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim/traffic"
)

// Stats are the load generator's counters. Arrivals = Sent + Skipped,
// and Sent = InFlight + Errors + Canceled + the sum of Statuses.
type Stats struct {
	Arrivals, Sent, Skipped, InFlight int64
	// Errors counts transport errors and streams cut short; Canceled counts
	// requests ended by Run's ctx (the demo stopping).
	Errors, Canceled int64
	// Statuses counts finished requests by HTTP status.
	Statuses map[int]int64
	// Reasons counts refusals by X-Gatekeeper-Reason.
	Reasons map[string]int64
	// RetryAfter503 counts the 503s that carried Retry-After (all of
	// gatekeeper's do; a pod's own may not).
	RetryAfter503 int64
}

// phaseResults are the requests that ended during one phase.
type phaseResults struct {
	short, long []time.Duration // latencies of the 2xx answers, send to last byte
	status503   int64
	retryAfter  int64 // 503s with Retry-After
	refused     int64 // 429s and 503s
}

func (p *phaseResults) add(class string, r result, took time.Duration) {
	switch {
	case r.status >= 200 && r.status < 300 && class == "long":
		p.long = append(p.long, took)
	case r.status >= 200 && r.status < 300:
		p.short = append(p.short, took)
	case r.status == http.StatusTooManyRequests:
		p.refused++
	case r.status == http.StatusServiceUnavailable:
		p.refused++
		p.status503++
		if r.retryAfter {
			p.retryAfter++
		}
	}
}

// Finished is the number of requests that ended.
func (s Stats) Finished() int64 {
	n := s.Errors + s.Canceled
	for _, c := range s.Statuses {
		n += c
	}
	return n
}

// Stats returns a copy of the counters.
func (g *Generator) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.stats
	s.Statuses, s.Reasons = maps.Clone(s.Statuses), maps.Clone(s.Reasons)
	return s
}

func (g *Generator) logPhase(ctx context.Context, p Phase) {
	g.s.Logger.LogAttrs(ctx, slog.LevelInfo, "load phase changed", slog.String("state", p.Name),
		slog.Float64("qps", p.QPS), slog.Float64("duration_s", p.Duration.Seconds()))
}

// logPhaseEnd logs what ended during phase p and starts the next phase's
// count: the answers' p99 latency by class (the steady phase after a burst
// is the recovery: its short p99 against its long p99 shows the queue
// draining shortest first), the 503s and how many carried Retry-After.
func (g *Generator) logPhaseEnd(ctx context.Context, p Phase) {
	g.mu.Lock()
	r := g.cur
	g.cur = phaseResults{}
	g.mu.Unlock()
	g.s.Logger.LogAttrs(ctx, slog.LevelInfo, "load phase ended", slog.String("state", p.Name),
		slog.Int("short_served", len(r.short)), slog.Float64("short_p99_s", seconds(traffic.Quantile(r.short, 0.99))),
		slog.Int("long_served", len(r.long)), slog.Float64("long_p99_s", seconds(traffic.Quantile(r.long, 0.99))),
		slog.Int64("refused", r.refused), slog.Int64("status_503", r.status503), slog.Int64("retry_after_503", r.retryAfter))
}

func (g *Generator) logSummary(ctx context.Context, msg string) {
	s := g.Stats()
	attrs := []slog.Attr{slog.Int64("arrivals", s.Arrivals), slog.Int64("sent", s.Sent),
		slog.Int64("skipped", s.Skipped), slog.Int64("pending", s.InFlight), slog.Int64("errors", s.Errors), slog.Int64("canceled", s.Canceled),
		slog.Int64("status_429", s.Statuses[http.StatusTooManyRequests]),
		slog.Int64("status_503", s.Statuses[http.StatusServiceUnavailable]), slog.Int64("retry_after_503", s.RetryAfter503)}
	var statuses, reasons []any
	for _, code := range slices.Sorted(maps.Keys(s.Statuses)) {
		statuses = append(statuses, slog.Int64(strconv.Itoa(code), s.Statuses[code]))
	}
	for _, r := range slices.Sorted(maps.Keys(s.Reasons)) {
		reasons = append(reasons, slog.Int64(r, s.Reasons[r]))
	}
	attrs = append(attrs, slog.Group("statuses", statuses...), slog.Group("reasons", reasons...))
	if g.s.State != nil {
		attrs = append(attrs, slog.Group("gatekeeper", attrsToAny(g.s.State())...))
	}
	g.s.Logger.LogAttrs(ctx, slog.LevelInfo, msg, attrs...)
}

func attrsToAny(attrs []slog.Attr) []any {
	out := make([]any, len(attrs))
	for i, a := range attrs {
		out[i] = a
	}
	return out
}

// seconds is d in seconds to 10 ms (2.35), as every logged duration: JSON
// logs would print a time.Duration as nanoseconds.
func seconds(d time.Duration) float64 { return d.Round(10 * time.Millisecond).Seconds() }
