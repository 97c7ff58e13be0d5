package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gatekeeper-dev/gatekeeper/sim"
)

const fixtures = "../../../shared/fixtures"

// newServer builds a server and starts its driver; call inside a synctest bubble.
func newServer(t *testing.T, es sim.Settings, s Settings) *Server {
	t.Helper()
	e, err := sim.New(es)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(e, s)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = srv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return srv
}

func do(srv *Server, method, path, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	return rec
}

// readFixture returns a fixture's bytes or skips the test when it is absent.
func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Skipf("fixture %s absent: %v", name, err)
	}
	return b
}

// sseEvents splits an SSE body into its data payloads.
func sseEvents(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// sameShape reports where got lacks a key that want has, recursively
// (arrays compare their first elements).
func sameShape(path string, want, got any) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return path + ": not an object"
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return path + "." + k + ": missing"
			}
			if wv == nil || gv == nil {
				continue
			}
			if d := sameShape(path+"."+k, wv, gv); d != "" {
				return d
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok {
			return path + ": not an array"
		}
		if len(w) > 0 && len(g) > 0 {
			return sameShape(path+"[0]", w[0], g[0])
		}
	}
	return ""
}

func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %q: %v", s, err)
	}
	return v
}

func TestResponsesMatchFixtureShapes(t *testing.T) {
	tests := []struct {
		name, path, body, fixture string
	}{
		{"completion", "/v1/completions", `{"prompt":"Once upon a time","max_tokens":8}`, "llmd-sim-completions-nonstream.json"},
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hello there, how are you?"}],"max_tokens":12}`, "llmd-sim-chat-nonstream.json"},
		{"completion stream", "/v1/completions", `{"prompt":"Once upon a time","max_tokens":8,"stream":true}`, "llmd-sim-completions-stream.sse"},
		{"chat stream with usage", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}`, "llmd-sim-chat-stream.sse"},
		{"bad json", "/v1/completions", `{nope`, "llmd-sim-error-400-bad-json.json"},
		{"unknown model", "/v1/completions", `{"model":"no-such-model","prompt":"x"}`, "llmd-sim-error-404-model.json"},
		{"context length", "/v1/completions", `{"prompt":"x","max_tokens":50000}`, "llmd-sim-error-400-context-length.json"},
		{"models", "/v1/models", ``, "llmd-sim-models.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := string(readFixture(t, tt.fixture))
			synctest.Test(t, func(t *testing.T) {
				srv := newServer(t, sim.Settings{}, Settings{Seed: 1})
				method := http.MethodPost
				if tt.body == "" {
					method = http.MethodGet
				}
				rec := do(srv, method, tt.path, tt.body)
				if !strings.HasSuffix(tt.fixture, ".sse") {
					if d := sameShape("$", decode(t, want), decode(t, rec.Body.String())); d != "" {
						t.Fatalf("%s: %s\ngot  %s\nwant %s", tt.path, d, rec.Body.String(), want)
					}
					if strings.Contains(tt.fixture, "error") {
						code := decode(t, want).(map[string]any)["error"].(map[string]any)["code"].(float64)
						if rec.Code != int(code) {
							t.Fatalf("status = %d, want %v", rec.Code, code)
						}
					}
					return
				}
				if ct := rec.Header().Get("Content-Type"); ct != "text/event-stream" {
					t.Fatalf("Content-Type = %q", ct)
				}
				got, exp := sseEvents(t, rec.Body.String()), sseEvents(t, want)
				if got[len(got)-1] != "[DONE]" || len(got) < 3 {
					t.Fatalf("stream = %q, want chunks then [DONE]", got)
				}
				// first chunk, finish chunk and (with usage) the usage chunk have the fixture's shape
				pairs := [][2]string{{exp[0], got[0]}, {exp[len(exp)-2], got[len(got)-2]}}
				if strings.Contains(tt.body, "include_usage") {
					pairs = append(pairs, [2]string{exp[len(exp)-3], got[len(got)-3]})
				}
				for _, p := range pairs {
					if d := sameShape("$", decode(t, p[0]), decode(t, p[1])); d != "" {
						t.Fatalf("chunk %s: %s (fixture %s)", p[1], d, p[0])
					}
				}
			})
		})
	}
}

func TestCompletionUsageAndLength(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, sim.Settings{}, Settings{FullOutput: true})
		rec := do(srv, http.MethodPost, "/v1/completions", `{"prompt":"0123456789abcdef","max_tokens":5}`)
		var resp response
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || rec.Code != 200 {
			t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
		}
		u := resp.Usage
		if u.PromptTokens != 4 || u.CompletionTokens != 5 || u.TotalTokens != 9 || *resp.Choices[0].FinishReason != "length" {
			t.Fatalf("usage %+v finish %s, want 4 + 5 tokens, length", u, *resp.Choices[0].FinishReason)
		}
	})
}

// TestOOMFailsInFlightRequests drives an engine with little headroom into an
// OOM: one request's prompt_logprobs over a long prompt (never profiled)
// cannot fit; non-streaming requests get 500, streams an error event, health
// turns 503, and the engine serves again after its restart time.
func TestOOMFailsInFlightRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e0, err := sim.New(sim.Settings{})
		if err != nil {
			t.Fatal(err)
		}
		p := e0.Plan()
		srv := newServer(t, sim.Settings{OtherProcessBytes: p.ActivationBudgetBytes - p.ActivationPeakBytes - 256<<20}, Settings{})
		var wg sync.WaitGroup
		recs := make([]*httptest.ResponseRecorder, 200)
		long := strings.Repeat("word ", 1600) // 2000 tokens at 4 characters a token
		for i := range recs {
			body := `{"prompt":"hello","max_tokens":8,"top_p":0.9}`
			switch {
			case i == 0:
				body = `{"prompt":"` + long + `","max_tokens":8,"prompt_logprobs":1}`
			case i%2 == 1:
				body = `{"prompt":"hello","max_tokens":8,"top_p":0.9,"stream":true}`
			}
			wg.Go(func() { recs[i] = do(srv, http.MethodPost, "/v1/completions", body) })
		}
		wg.Wait()
		for i, rec := range recs {
			if i%2 == 0 && (rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "out of memory")) {
				t.Fatalf("request %d: %d %s, want 500 out of memory", i, rec.Code, rec.Body)
			}
			if ev := sseEvents(t, rec.Body.String()); i%2 == 1 && (rec.Code != 200 || !strings.Contains(ev[len(ev)-2], `"error"`) || ev[len(ev)-1] != "[DONE]") {
				t.Fatalf("stream %d: %d %q, want an error event then [DONE]", i, rec.Code, ev)
			}
		}
		if rec := do(srv, http.MethodGet, "/health", ""); rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("/health = %d while restarting, want 503", rec.Code)
		}
		if rec := do(srv, http.MethodPost, "/v1/completions", `{"prompt":"x"}`); rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("completion while restarting = %d, want 503", rec.Code)
		}
		time.Sleep(91 * time.Second) // fake time: the restart delay passes
		if rec := do(srv, http.MethodGet, "/health", ""); rec.Code != http.StatusOK {
			t.Fatalf("/health = %d after the restart time, want 200", rec.Code)
		}
	})
}

func TestClientDisconnectAborts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, sim.Settings{}, Settings{FullOutput: true})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/completions", strings.NewReader(`{"prompt":"x","max_tokens":4000}`))
			srv.ServeHTTP(httptest.NewRecorder(), req)
			close(done)
		}()
		time.Sleep(time.Second)
		cancel()
		<-done
		srv.mu.Lock()
		m := srv.e.Metrics()
		srv.mu.Unlock()
		if m.Running != 0 || m.KVCacheUsage != 0 || len(srv.pending) != 0 {
			t.Fatalf("after disconnect: running %d kv %v pending %d, want all freed", m.Running, m.KVCacheUsage, len(srv.pending))
		}
	})
}

func TestMetricsAndMemoryBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, sim.Settings{}, Settings{})
		do(srv, http.MethodPost, "/v1/completions", `{"prompt":"hello","max_tokens":3}`)
		rec := do(srv, http.MethodGet, "/metrics", "")
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(rec.Body)
		if err != nil {
			t.Fatalf("/metrics does not parse: %v", err)
		}
		for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
			"vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "DCGM_FI_DEV_FB_USED"} {
			if fams[name] == nil || fams[name].GetHelp() == "" {
				t.Fatalf("/metrics lacks %s with HELP", name)
			}
		}
		if v := fams["vllm:prompt_tokens_total"].Metric[0].GetCounter().GetValue(); v != 2 {
			t.Fatalf("prompt tokens = %v, want 2", v)
		}
		var mb struct {
			MemoryBlocks []sim.MemoryBlocks `json:"memory_blocks"`
		}
		rec = do(srv, http.MethodGet, "/v1/internal/metrics", "")
		if err := json.Unmarshal(rec.Body.Bytes(), &mb); err != nil || len(mb.MemoryBlocks) != 1 {
			t.Fatalf("memory_blocks = %s: %v", rec.Body, err)
		}
		b := mb.MemoryBlocks[0]
		if b.GPUID != "0" || b.UsedBytes+b.FreeBytes != b.TotalBytes || b.LargestFreeBlockBytes > b.FreeBytes ||
			b.FragmentationRatio <= 0 || b.FragmentationRatio > 1 || b.AllocatedBytes > b.ReservedBytes {
			t.Fatalf("memory_blocks inconsistent: %+v", b)
		}
		rec = do(srv, http.MethodPost, "/v1/internal/empty_cache", "")
		// the allocator exporter's answer (exporters/pytorch, relief.py)
		var rel struct {
			ReleasedBytes int64   `json:"released_bytes"`
			DurationS     float64 `json:"duration_s"`
			Devices       []struct {
				GPUID                                   string `json:"gpu_id"`
				ReservedBeforeBytes, ReservedAfterBytes int64
				ReleasedBytes                           int64 `json:"released_bytes"`
			} `json:"devices"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &rel); err != nil || rel.ReleasedBytes <= 0 || len(rel.Devices) != 1 ||
			rel.Devices[0].GPUID != "0" || rel.Devices[0].ReleasedBytes != rel.ReleasedBytes {
			t.Fatalf("empty_cache = %s, want released bytes > 0 after a request, one device", rec.Body)
		}
	})
}

// TestServeOverLoopback runs the driver and a real listener, as gatekeeper
// -demo does, and streams one completion through real HTTP.
func TestServeOverLoopback(t *testing.T) {
	e, err := sim.New(sim.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(e, Settings{Speed: 100})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ctx, ln) }()
	resp, err := http.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, d)
		}
	}
	resp.Body.Close()
	if len(events) < 3 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream = %q", events)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Serve() = %v, want nil after cancel", err)
	}
}
