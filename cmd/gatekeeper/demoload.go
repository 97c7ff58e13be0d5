package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// loadSettings configures the demo's built-in traffic pattern (-demo-load):
// open-loop Poisson arrivals at QPS for Steady, then at BurstFactor × QPS for
// Burst, repeating; a mix of short streaming chats and long documents. The
// zero value plus URL and Model selects the defaults.
type loadSettings struct {
	// URL is gatekeeper's traffic base URL ("http://127.0.0.1:8080").
	URL string
	// Model is the model name sent in every request.
	Model string
	// QPS is the steady arrival rate per second. 0 means 2, which the demo
	// pod serves with room to spare; its bursts (8 QPS) fill the KV cache.
	QPS float64
	// BurstFactor multiplies QPS during a burst. 0 means 4; must be ≥ 1.
	BurstFactor float64
	// Steady and Burst are the phase lengths. 0 means 30s and 15s.
	Steady, Burst time.Duration
	// LongFraction is the share of long documents (2 000–4 000 prompt
	// tokens, up to 512 out); the rest are short chats (50–200 tokens, up to
	// 128 out, streamed). 0 means 0.2; negative means none; at most 1.
	LongFraction float64
	// MaxConcurrent bounds the requests in flight; an arrival beyond it is
	// skipped (counted, never sent). 0 means 128.
	MaxConcurrent int
	// MaxRequests bounds the arrivals over the run. 0 means 1 000 000.
	MaxRequests int
	// RequestTimeout bounds one request, body included. 0 means 2m.
	RequestTimeout time.Duration
	// ReportEvery is the interval between summary log lines. 0 means 5s.
	ReportEvery time.Duration
	// Seed makes the arrivals and request mix reproducible.
	Seed uint64
	// Client sends the requests. Nil means a client of the generator's own.
	Client doer
	// Logger receives phase changes and summaries. Nil discards.
	Logger *slog.Logger
	// State, if set, adds gatekeeper's state to each summary line.
	State func() []slog.Attr
	// OnResult, if set, is called as each request ends, with its status
	// (0 for a transport error), from the request's goroutine.
	OnResult func(status int)
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
}

// doer is what the load generator needs from an HTTP client.
type doer interface {
	Do(*http.Request) (*http.Response, error)
}

// loadStats are the load generator's counters. Arrivals = Sent + Skipped,
// and Sent = InFlight + Errors + Canceled + the sum of Statuses.
type loadStats struct {
	Arrivals, Sent, Skipped, InFlight int64
	// Errors counts transport errors and streams cut short; Canceled counts
	// requests ended by Run's ctx (the demo stopping).
	Errors, Canceled int64
	// Statuses counts finished requests by HTTP status.
	Statuses map[int]int64
	// Reasons counts refusals by X-Gatekeeper-Reason.
	Reasons map[string]int64
}

// finished is the number of requests that ended.
func (s loadStats) finished() int64 {
	n := s.Errors + s.Canceled
	for _, c := range s.Statuses {
		n += c
	}
	return n
}

// loadGen is the demo's traffic generator. Create one with newLoadGen; Run
// it once. Safe for concurrent use; must not be copied.
type loadGen struct {
	s    loadSettings
	rng  *rand.Rand // used only by Run's goroutine
	sem  chan struct{}
	text string

	// mu guards stats.
	mu    sync.Mutex
	stats loadStats
}

func newLoadGen(s loadSettings) (*loadGen, error) {
	if s.URL == "" || s.Model == "" {
		return nil, errors.New("gatekeeper: demo load: URL and Model are required")
	}
	s.QPS = orFloat(s.QPS, 2)
	s.BurstFactor = orFloat(s.BurstFactor, 4)
	s.LongFraction = orFloat(s.LongFraction, 0.2)
	if s.QPS < 0 || s.BurstFactor < 1 || s.LongFraction > 1 {
		return nil, fmt.Errorf("gatekeeper: demo load: qps %g, burst factor %g, long fraction %g out of range",
			s.QPS, s.BurstFactor, s.LongFraction)
	}
	s.Steady = orDuration(s.Steady, 30*time.Second)
	s.Burst = orDuration(s.Burst, 15*time.Second)
	s.RequestTimeout = orDuration(s.RequestTimeout, 2*time.Minute)
	s.ReportEvery = orDuration(s.ReportEvery, 5*time.Second)
	if s.MaxConcurrent <= 0 {
		s.MaxConcurrent = 128
	}
	if s.MaxRequests <= 0 {
		s.MaxRequests = 1_000_000
	}
	if s.Client == nil {
		s.Client = demoHTTPClient(s.MaxConcurrent)
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	return &loadGen{s: s, rng: rand.New(rand.NewPCG(s.Seed, 0x6761746b)), sem: make(chan struct{}, s.MaxConcurrent),
		text:  strings.Repeat(loremGPU, 16000/len(loremGPU)+1),
		stats: loadStats{Statuses: map[int]int64{}, Reasons: map[string]int64{}}}, nil
}

// Run sends the pattern until ctx ends or MaxRequests have arrived, then
// waits for the requests in flight (ctx cancels them) and logs a last
// summary. It returns nil.
func (g *loadGen) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	start := g.s.Now()
	burst := false
	phaseEnd := start.Add(g.s.Steady)
	nextReport := start.Add(g.s.ReportEvery)
	next := start.Add(g.gap(burst))
	g.logPhase(ctx, burst)
	for arrivals := 0; arrivals < g.s.MaxRequests; {
		wake := minTime(next, phaseEnd, nextReport)
		t := time.NewTimer(wake.Sub(g.s.Now()))
		select {
		case <-ctx.Done():
			t.Stop()
			g.finish(&wg)
			return nil
		case <-t.C:
		}
		now := g.s.Now()
		if !now.Before(phaseEnd) {
			burst = !burst
			phaseEnd = phaseEnd.Add(g.phaseLen(burst))
			next = now.Add(g.gap(burst)) // arrivals are memoryless: redraw at the new rate
			g.logPhase(ctx, burst)
		}
		if !now.Before(nextReport) {
			nextReport = nextReport.Add(g.s.ReportEvery)
			g.logSummary(ctx, "load summary")
		}
		for !now.Before(next) && arrivals < g.s.MaxRequests {
			arrivals++
			g.arrive(ctx, &wg)
			next = next.Add(g.gap(burst))
		}
	}
	g.finish(&wg)
	return nil
}

// finish waits for the requests in flight, closes the client's idle
// connections and logs the last summary.
func (g *loadGen) finish(wg *sync.WaitGroup) {
	wg.Wait()
	if c, ok := g.s.Client.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	g.logSummary(context.Background(), "load stopped")
}

// Stats returns a copy of the counters.
func (g *loadGen) Stats() loadStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.stats
	s.Statuses, s.Reasons = maps.Clone(s.Statuses), maps.Clone(s.Reasons)
	return s
}

func (g *loadGen) phaseLen(burst bool) time.Duration {
	if burst {
		return g.s.Burst
	}
	return g.s.Steady
}

func (g *loadGen) rate(burst bool) float64 {
	if burst {
		return g.s.QPS * g.s.BurstFactor
	}
	return g.s.QPS
}

// gap draws the time to the next arrival (exponential: Poisson arrivals).
// A zero rate waits an hour, which a phase change or ctx cuts short.
func (g *loadGen) gap(burst bool) time.Duration {
	r := g.rate(burst)
	if r <= 0 {
		return time.Hour
	}
	return max(time.Duration(g.rng.ExpFloat64()/r*float64(time.Second)), time.Microsecond)
}

// arrive sends one request if the concurrency bound allows.
func (g *loadGen) arrive(ctx context.Context, wg *sync.WaitGroup) {
	g.mu.Lock()
	g.stats.Arrivals++
	g.mu.Unlock()
	select {
	case g.sem <- struct{}{}:
	default:
		g.mu.Lock()
		g.stats.Skipped++
		g.mu.Unlock()
		return
	}
	body, err := g.request()
	g.mu.Lock()
	g.stats.Sent++
	g.stats.InFlight++
	g.mu.Unlock()
	wg.Go(func() {
		defer func() { <-g.sem }()
		status, reason := g.send(ctx, body, err)
		g.mu.Lock()
		g.stats.InFlight--
		switch {
		case status == 0 && ctx.Err() != nil:
			g.stats.Canceled++
		case status == 0:
			g.stats.Errors++
		default:
			g.stats.Statuses[status]++
		}
		if reason != "" {
			g.stats.Reasons[reason]++
		}
		g.mu.Unlock()
		if g.s.OnResult != nil {
			g.s.OnResult(status)
		}
	})
}

// send posts one chat completion and reads the answer to its end. It
// returns the status (0 on a transport error) and X-Gatekeeper-Reason.
func (g *loadGen) send(ctx context.Context, body []byte, buildErr error) (int, string) {
	if buildErr != nil {
		return 0, ""
	}
	ctx, cancel := context.WithTimeout(ctx, g.s.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.s.URL+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, ""
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := g.s.Client.Do(req)
	if err != nil {
		return 0, ""
	}
	defer res.Body.Close()
	if _, err := io.Copy(io.Discard, io.LimitReader(res.Body, 64<<20)); err != nil && res.StatusCode < 300 {
		return 0, "" // a stream cut short is not a success
	}
	return res.StatusCode, res.Header.Get("X-Gatekeeper-Reason")
}

// chatRequest is the OpenAI body the generator sends.
type chatRequest struct {
	Model         string         `json:"model"`
	Messages      []chatMessage  `json:"messages"`
	MaxTokens     int            `json:"max_tokens"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// request draws the next request: a long document (not streamed) or a short
// chat (streamed). Prompt sizes are in characters, about 4 per token.
func (g *loadGen) request() ([]byte, error) {
	r := chatRequest{Model: g.s.Model}
	if g.rng.Float64() < g.s.LongFraction {
		n := 8000 + g.rng.IntN(8001)
		r.MaxTokens = 128 + g.rng.IntN(385)
		r.Messages = []chatMessage{{Role: "user", Content: "Summarise this document:\n" + g.text[:n]}}
	} else {
		n := 200 + g.rng.IntN(601)
		r.MaxTokens = 16 + g.rng.IntN(113)
		r.Stream, r.StreamOptions = true, &streamOptions{IncludeUsage: true}
		r.Messages = []chatMessage{{Role: "user", Content: g.text[:n]}}
	}
	return json.Marshal(r)
}

func (g *loadGen) logPhase(ctx context.Context, burst bool) {
	phase := "steady"
	if burst {
		phase = "burst"
	}
	g.s.Logger.LogAttrs(ctx, slog.LevelInfo, "load phase changed", slog.String("state", phase),
		slog.Float64("qps", g.rate(burst)), slog.Duration("duration", g.phaseLen(burst)))
}

func (g *loadGen) logSummary(ctx context.Context, msg string) {
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

func minTime(ts ...time.Time) time.Time {
	m := ts[0]
	for _, t := range ts[1:] {
		if t.Before(m) {
			m = t
		}
	}
	return m
}

func orFloat(v, def float64) float64 {
	if v == 0 || math.IsNaN(v) {
		return def
	}
	return v
}

func orDuration(v, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return v
}

// loremGPU is the prompt text; prompts are prefixes of it repeated.
const loremGPU = "A caching allocator keeps freed blocks inside the segments it reserved, so " +
	"a later request of a similar size is served without asking the driver. Mixed prompt " +
	"lengths leave odd-sized holes between long-lived tensors, and after hours of uptime the " +
	"free memory is plentiful but no single block is large enough for the next activation " +
	"buffer. "
