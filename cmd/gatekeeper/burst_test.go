package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/admin"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/sim"
	"github.com/gatekeeper-dev/gatekeeper/sim/server"
)

// The burst end-to-end test of issue 5 through the HTTP handlers: the
// simulated vLLM (sim/server's handler and driver) receives the same burst
// once directly and once through gatekeeper's handler, wired as main wires
// it, with config.yaml's default rules and the pod's /metrics and
// memory_blocks endpoint as pressure sources. Everything runs inside a
// synctest bubble: the sim's clock, gatekeeper's pressure polls and the
// arrivals are on the bubble's fake clock, and requests go through
// in-process round trippers instead of sockets, so the run is the same on a
// loaded CI machine as on an idle one. The pod: H100-80G, Llama-3-8B, vLLM's
// defaults except gpu_memory_utilization 0.99 and max_num_seqs 256. The
// burst: chat, and one request in twenty scoring a long document with
// prompt_logprobs (the prompt-logprobs scenario of sim/replay/README.md),
// whose logits vLLM's profile never runs. cmd/vllm-sim's TestBurstEndToEnd
// makes the same point on the replay's cores over ten minutes of trace.
const (
	burstQPS     = 80  // arrivals per second: the replay's burst
	burstSize    = 960 // 12 seconds of burst
	burstMaxSeqs = 256
)

// burstPod is a simulated pod: its HTTP handler, reachable in process, and
// its driver goroutine.
type burstPod struct {
	srv  *server.Server
	stop func()
}

func newBurstPod(t *testing.T, util float64) *burstPod {
	t.Helper()
	gpu, err := sim.GPUByName("H100-80G")
	if err != nil {
		t.Fatal(err)
	}
	// RestartTime: an OOM'd pod stays down for the rest of the test.
	e, err := sim.New(sim.Settings{GPU: gpu, GPUMemoryUtilization: util, MaxNumSeqs: burstMaxSeqs, RestartTime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(e, server.Settings{Speed: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx) }()
	return &burstPod{srv: srv, stop: func() { cancel(); <-done }}
}

// RoundTrip serves r with the pod's handler: the pod as gatekeeper's
// upstream transport and as the pressure sources' client.
func (p *burstPod) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	p.srv.ServeHTTP(rec, r)
	res := rec.Result()
	res.Request = r // as net/http's Transport sets it
	return res, nil
}

// get serves GET path on the pod and returns the status and body.
func (p *burstPod) get(path string) (int, string) {
	rec := httptest.NewRecorder()
	p.srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// ooms reads vllm_sim_engine_ooms_total from a live pod's /metrics.
func (p *burstPod) ooms(t *testing.T) int {
	t.Helper()
	code, body := p.get("/metrics")
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "vllm_sim_engine_ooms_total "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("vllm_sim_engine_ooms_total %q: %v", v, err)
			}
			return int(n)
		}
	}
	t.Fatalf("the pod's /metrics (%d) lacks vllm_sim_engine_ooms_total", code)
	return 0
}

// burstResult counts what the clients of one burst heard.
type burstResult struct {
	statuses     map[int]int
	reasons      map[string]int // X-Gatekeeper-Reason
	noRetryAfter int            // 429/503 without Retry-After
	lastError    string         // body of the last 500
}

// sendBurst sends burstSize chat completions to h, one every 1/burstQPS s
// of the bubble's clock, in the replay's mix (sim/replay/README.md): 85 %
// short chat (prompt 50–250 tokens, max_tokens 256), 15 % long documents
// (prompt 1 000–2 000, max_tokens 512), half sampling with top-p; and every
// twentieth a scoring request (prompt 2 000–8 000 tokens, max_tokens 1,
// prompt_logprobs 1); sizes from a fixed seed. It returns when every request
// has been answered.
func sendBurst(t *testing.T, h http.Handler) burstResult {
	t.Helper()
	res := burstResult{statuses: map[int]int{}, reasons: map[string]int{}}
	rng := rand.New(rand.NewPCG(1, 5))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range burstSize {
		prompt, maxTokens := 50+rng.IntN(201), 256
		if rng.IntN(100) < 15 {
			prompt, maxTokens = 1000+rng.IntN(1001), 512
		}
		topP := 1.0
		if rng.IntN(2) == 0 {
			topP = 0.9
		}
		extra := ""
		if i%20 == 10 {
			prompt, maxTokens, extra = 2000+rng.IntN(6001), 1, `,"prompt_logprobs":1`
		}
		// The sim counts ⌈characters ÷ 4⌉ + 4 tokens per message.
		body := fmt.Sprintf(`{"model":"meta-llama/Meta-Llama-3-8B","max_tokens":%d,"top_p":%g%s,"messages":[{"role":"user","content":%q}]}`,
			maxTokens, topP, extra, strings.Repeat("tok ", prompt-4))
		if i > 0 {
			time.Sleep(time.Second / burstQPS) // the arrival schedule, on the fake clock
		}
		wg.Go(func() {
			req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			mu.Lock()
			defer mu.Unlock()
			res.statuses[rec.Code]++
			if reason := rec.Header().Get("X-Gatekeeper-Reason"); reason != "" {
				res.reasons[reason]++
			}
			if (rec.Code == http.StatusTooManyRequests || rec.Code == http.StatusServiceUnavailable) &&
				rec.Header().Get("Retry-After") == "" {
				res.noRetryAfter++
			}
			if rec.Code == http.StatusInternalServerError {
				res.lastError = rec.Body.String()
			}
		})
	}
	wg.Wait()
	t.Logf("statuses %v, reasons %v", res.statuses, res.reasons)
	return res
}

// burstPolicy is config.yaml's defaults for one simulated pod with its two
// sources and memory admission on (vocab_size: the simulated Llama 3's). No
// rate limit (the burst is the point) and no relief hooks (the hook runner
// dials real sockets, which a synctest bubble must not wait on).
const burstPolicy = `
upstreams:
  - name: pod
    url: http://pod.test:8000
    max_inflight: 256
    vocab_size: 128256
    sources:
      - {kind: vllm, url: "http://pod.test:8000/metrics"}
      - {kind: memory_blocks, url: "http://pod.test:8000/v1/internal/metrics"}
fast_breaker: {qps: 0}
hooks: {degraded: [], critical: [], recovered: []}
`

func TestBurstOverHTTP(t *testing.T) {
	t.Run("without gatekeeper the burst OOMs the pod", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			pod := newBurstPod(t, 0.99)
			defer pod.stop()
			res := sendBurst(t, pod.srv)
			if code, _ := pod.get("/health"); code != http.StatusServiceUnavailable {
				t.Errorf("pod /health = %d after the burst, want 503 (engine dead)", code)
			}
			if res.statuses[http.StatusInternalServerError] == 0 || !strings.Contains(res.lastError, "out of memory") {
				t.Errorf("statuses %v, last error %q; want in-flight requests failed with 500 by a CUDA OOM", res.statuses, res.lastError)
			}
		})
	})

	t.Run("through gatekeeper no OOM, the burst served, every refusal says when to retry", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			pod := newBurstPod(t, 0.99)
			defer pod.stop()
			cfg, err := config.Parse([]byte(burstPolicy))
			if err != nil {
				t.Fatal(err)
			}
			a, err := newApp(cfg, appOptions{transport: pod, sources: &http.Client{Transport: pod}})
			if err != nil {
				t.Fatal(err)
			}
			defer a.close()
			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			if err := a.startLoops(ctx, &wg); err != nil {
				t.Fatal(err)
			}
			// Two poll rounds, so both sources have answered.
			time.Sleep(2 * cfg.Pressure.Interval)
			synctest.Wait()
			us := soleUpstream(t, a)
			for _, sig := range []pressure.Signal{pressure.KVCacheUsage, pressure.Fragmentation, pressure.MemoryUsed} {
				if _, ok := us.Signals[sig]; !ok {
					t.Fatalf("signal %s absent before the burst (absent: %v)", sig, us.Absent)
				}
			}
			t.Logf("before the burst: level %s, window %d, memory_used %.4f, fragmentation %.4f", us.Level, us.WindowLimit,
				us.Signals[pressure.MemoryUsed].Value, us.Signals[pressure.Fragmentation].Value)

			res := sendBurst(t, a.handler)
			if code, ooms := pod.get("/health"); code != http.StatusOK || pod.ooms(t) != 0 {
				t.Fatalf("pod /health %d (%s), OOMs %d behind gatekeeper; want 200 and 0", code, ooms, pod.ooms(t))
			}
			if res.noRetryAfter != 0 || res.statuses[http.StatusInternalServerError] != 0 {
				t.Errorf("refusals without Retry-After %d, 500s %d; want none", res.noRetryAfter, res.statuses[http.StatusInternalServerError])
			}
			var answered int
			for _, n := range res.statuses {
				answered += n
			}
			if answered != burstSize {
				t.Errorf("%d answered, want %d", answered, burstSize)
			}
			// Why, pinned so the README and this test change together: each
			// request's memory (its sampler rows, a scoring request's prompt
			// logits) is counted against the free memory the pod reports, so
			// what would not fit waits or is refused (503 no_memory) instead
			// of growing the step past the device; no default rule reads
			// memory_used (≥ 0.98 from boot at 0.99), so the pod is never
			// critical. Only scoring requests are refused for memory; the
			// time-to-first-token deadline refuses what could not start
			// within 1.5 s (80 QPS against a pod that serves about 67/s,
			// with max_num_batched_tokens at vLLM's 8192 for an H100).
			us = soleUpstream(t, a)
			if us.Level == "critical" || res.statuses[http.StatusOK] < burstSize*8/10 || res.reasons["no_memory"] > burstSize/20 {
				t.Errorf("level %s, %d of %d served, %d refused for memory; want not critical, at least 80 %% served, only scoring requests refused for memory",
					us.Level, res.statuses[http.StatusOK], burstSize, res.reasons["no_memory"])
			}
		})
	})
}

// soleUpstream is /admin/state's entry for the test's one upstream.
func soleUpstream(t *testing.T, a *app) admin.Upstream {
	t.Helper()
	s := a.snapshot()
	if len(s.Upstreams) != 1 {
		t.Fatalf("state upstreams = %+v, want one", s.Upstreams)
	}
	return s.Upstreams[0]
}
