package load

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
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

func (g *Generator) logPhase(ctx context.Context, burst bool) {
	phase := "steady"
	if burst {
		phase = "burst"
	}
	g.s.Logger.LogAttrs(ctx, slog.LevelInfo, "load phase changed", slog.String("state", phase),
		slog.Float64("qps", g.rate(burst)), slog.Duration("duration", g.phaseLen(burst)))
}

func (g *Generator) logSummary(ctx context.Context, msg string) {
	s := g.Stats()
	attrs := []slog.Attr{slog.Int64("arrivals", s.Arrivals), slog.Int64("sent", s.Sent),
		slog.Int64("skipped", s.Skipped), slog.Int64("pending", s.InFlight), slog.Int64("errors", s.Errors), slog.Int64("canceled", s.Canceled),
		slog.Int64("status_429", s.Statuses[http.StatusTooManyRequests]),
		slog.Int64("status_503", s.Statuses[http.StatusServiceUnavailable])}
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
