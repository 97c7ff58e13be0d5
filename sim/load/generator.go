// Package load is the demo's traffic generator (gatekeeper -demo-load): it
// sends a repeating cycle of steady, burst and document-burst phases of
// OpenAI chat requests to a URL in real time and logs what came back,
// phase by phase. The arrivals, the request mix and the bodies are
// sim/traffic's, shared with the replay's synthetic trace.
package load

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim/traffic"
)

// Generator sends the demo's traffic. Create one with New; Run it once.
// Safe for concurrent use; must not be copied.
type Generator struct {
	s      Settings
	phases []Phase
	arr    *Arrivals // used only by Run's goroutine
	sem    chan struct{}
	long   string // the longest prompt; a request's is a prefix of it

	// mu guards stats and cur.
	mu    sync.Mutex
	stats Stats
	cur   phaseResults // what ended during the current phase
}

// New returns a generator for s, or an error naming what is out of range.
func New(s Settings) (*Generator, error) {
	s, err := s.withDefaults()
	if err != nil {
		return nil, err
	}
	phases := s.phases()
	g := &Generator{s: s, phases: phases, arr: newArrivals(phases, s.Seed),
		sem: make(chan struct{}, s.MaxConcurrent), stats: Stats{Statuses: map[int]int64{}, Reasons: map[string]int64{}}}
	longest := 0
	for _, p := range g.phases {
		for _, c := range p.Mix {
			longest = max(longest, c.Prompt.Max)
		}
	}
	g.long = traffic.Filler(longest)
	return g, nil
}

// Run sends the cycle of phases (the sequence Settings.Arrivals yields)
// until ctx ends or MaxRequests have arrived, then waits for the requests
// in flight (ctx cancels them) and logs a last summary. Each phase's end is
// logged with what ended during it. It returns nil.
func (g *Generator) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	start := g.s.Now()
	i := 0
	phaseEnd := start.Add(g.phases[0].Duration)
	nextReport := start.Add(g.s.ReportEvery)
	a := g.arr.Next()
	g.logPhase(ctx, g.phases[0])
	for arrivals := 0; arrivals < g.s.MaxRequests; {
		wake := minTime(start.Add(a.At), phaseEnd, nextReport)
		t := time.NewTimer(wake.Sub(g.s.Now()))
		select {
		case <-ctx.Done():
			t.Stop()
			g.finish(&wg)
			return nil
		case <-t.C:
		}
		now := g.s.Now()
		for at := start.Add(a.At); !now.Before(at) && at.Before(phaseEnd) && arrivals < g.s.MaxRequests; at = start.Add(a.At) {
			arrivals++
			g.arrive(ctx, &wg, a)
			a = g.arr.Next()
		}
		if !now.Before(phaseEnd) {
			g.logPhaseEnd(ctx, g.phases[i])
			i = (i + 1) % len(g.phases)
			phaseEnd = phaseEnd.Add(g.phases[i].Duration)
			g.logPhase(ctx, g.phases[i])
		}
		if !now.Before(nextReport) {
			nextReport = nextReport.Add(g.s.ReportEvery)
			g.logSummary(ctx, "load summary")
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

// arrive sends a if the concurrency bound allows.
func (g *Generator) arrive(ctx context.Context, wg *sync.WaitGroup, a Arrival) {
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
	body, err := g.request(a)
	g.mu.Lock()
	g.stats.Sent++
	g.stats.InFlight++
	g.mu.Unlock()
	wg.Go(func() {
		defer func() { <-g.sem }()
		start := g.s.Now()
		r := g.send(ctx, body, err)
		took := g.s.Now().Sub(start)
		g.mu.Lock()
		g.stats.InFlight--
		switch {
		case r.status == 0 && ctx.Err() != nil:
			g.stats.Canceled++
		case r.status == 0:
			g.stats.Errors++
		default:
			g.stats.Statuses[r.status]++
		}
		if r.reason != "" {
			g.stats.Reasons[r.reason]++
		}
		if r.status == http.StatusServiceUnavailable && r.retryAfter {
			g.stats.RetryAfter503++
		}
		g.cur.add(a.Class, r, took)
		g.mu.Unlock()
		if g.s.OnResult != nil {
			g.s.OnResult(r.status)
		}
	})
}

// chatBody is a chat request with an optional top_p and prompt_logprobs.
type chatBody struct {
	traffic.ChatRequest
	TopP           *float64 `json:"top_p,omitempty"`
	PromptLogprobs *int     `json:"prompt_logprobs,omitempty"`
}

// request builds a's body: a long document to summarise (answered whole)
// or a short chat (streamed), with top_p 0.9 and prompt_logprobs when a asks
// for them.
func (g *Generator) request(a Arrival) ([]byte, error) {
	content := g.long[:a.Prompt*traffic.CharsPerToken]
	if !a.Stream {
		content = "Summarise this document:\n" + content
	}
	body := chatBody{ChatRequest: traffic.Chat(g.s.Model, content, a.MaxTokens, a.Stream)}
	if a.TopP {
		topP := 0.9
		body.TopP = &topP
	}
	if a.PromptLogprobs {
		one := 1 // the prompt token's own logprob and the top one; vLLM computes the whole vocabulary's either way
		body.PromptLogprobs = &one
	}
	return json.Marshal(body)
}

// result is how one request ended.
type result struct {
	status     int    // 0 on a transport error or a stream cut short
	reason     string // X-Gatekeeper-Reason
	retryAfter bool   // the response carried Retry-After
}

// send posts one chat completion and reads the answer to its end.
func (g *Generator) send(ctx context.Context, body []byte, buildErr error) result {
	if buildErr != nil {
		return result{}
	}
	ctx, cancel := context.WithTimeout(ctx, g.s.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.s.URL+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return result{}
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := g.s.Client.Do(req)
	if err != nil {
		return result{}
	}
	defer res.Body.Close()
	if _, err := io.Copy(io.Discard, io.LimitReader(res.Body, 64<<20)); err != nil && res.StatusCode < 300 {
		return result{} // a stream cut short is not a success
	}
	return result{status: res.StatusCode, reason: res.Header.Get("X-Gatekeeper-Reason"), retryAfter: res.Header.Get("Retry-After") != ""}
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
