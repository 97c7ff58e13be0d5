// Package load is the demo's traffic generator (gatekeeper -demo-load): it
// sends a pattern of steady and burst phases of OpenAI chat requests to a
// URL in real time and logs what came back. The pattern, the request mix and
// the bodies are sim/traffic's, shared with the replay's synthetic trace.
package load

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim/traffic"
)

// Generator sends the demo's traffic. Create one with New; Run it once.
// Safe for concurrent use; must not be copied.
type Generator struct {
	s    Settings
	mix  traffic.Mix
	rng  *rand.Rand        // used only by Run's goroutine
	arr  *traffic.Arrivals // draws from rng
	sem  chan struct{}
	long string // the longest prompt; a request's is a prefix of it

	// mu guards stats.
	mu    sync.Mutex
	stats Stats
}

// New returns a generator for s, or an error naming what is out of range.
func New(s Settings) (*Generator, error) {
	s, err := s.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &Generator{s: s, mix: s.mix(), rng: rand.New(rand.NewPCG(s.Seed, 0x6761746b)),
		sem: make(chan struct{}, s.MaxConcurrent), stats: Stats{Statuses: map[int]int64{}, Reasons: map[string]int64{}}}
	g.arr = traffic.NewArrivals(s.pattern(), g.rng)
	longest := 0
	for _, c := range g.mix {
		longest = max(longest, c.Prompt.Max)
	}
	g.long = traffic.Filler(longest)
	return g, nil
}

// Run sends the pattern until ctx ends or MaxRequests have arrived, then
// waits for the requests in flight (ctx cancels them) and logs a last
// summary. It returns nil.
func (g *Generator) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	start := g.s.Now()
	burst := false
	phaseEnd := start.Add(g.s.Steady)
	nextReport := start.Add(g.s.ReportEvery)
	next := start.Add(g.arr.Next())
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
			g.logPhase(ctx, burst)
		}
		if !now.Before(nextReport) {
			nextReport = nextReport.Add(g.s.ReportEvery)
			g.logSummary(ctx, "load summary")
		}
		for !now.Before(next) && arrivals < g.s.MaxRequests {
			arrivals++
			g.arrive(ctx, &wg)
			next = start.Add(g.arr.Next())
		}
	}
	g.finish(&wg)
	return nil
}

// finish waits for the requests in flight, closes the client's idle
// connections and logs the last summary.
func (g *Generator) finish(wg *sync.WaitGroup) {
	wg.Wait()
	if c, ok := g.s.Client.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	g.logSummary(context.Background(), "load stopped")
}

func (g *Generator) phaseLen(burst bool) time.Duration {
	if burst {
		return g.s.Burst
	}
	return g.s.Steady
}

func (g *Generator) rate(burst bool) float64 {
	if burst {
		return g.s.QPS * g.s.BurstFactor
	}
	return g.s.QPS
}

// arrive sends one request if the concurrency bound allows.
func (g *Generator) arrive(ctx context.Context, wg *sync.WaitGroup) {
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

// request draws the next request from the mix: a long document to
// summarise (answered whole) or a short chat (streamed). Its drawn output
// length goes out as max_tokens.
func (g *Generator) request() ([]byte, error) {
	c := g.mix[g.mix.Pick(g.rng)]
	prompt, out := c.Prompt.Draw(g.rng), c.Output.Draw(g.rng)
	content := g.long[:prompt*traffic.CharsPerToken]
	if !c.Stream {
		content = "Summarise this document:\n" + content
	}
	return json.Marshal(traffic.Chat(g.s.Model, content, out, c.Stream))
}

// send posts one chat completion and reads the answer to its end. It
// returns the status (0 on a transport error) and X-Gatekeeper-Reason.
func (g *Generator) send(ctx context.Context, body []byte, buildErr error) (int, string) {
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

func minTime(ts ...time.Time) time.Time {
	m := ts[0]
	for _, t := range ts[1:] {
		if t.Before(m) {
			m = t
		}
	}
	return m
}
