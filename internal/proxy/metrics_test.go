package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/usage"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// sseChunk is one streamed chat completion chunk, as vLLM frames it.
func sseChunk(content, usage string) string {
	return `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` +
		content + `"}}],"usage":` + usage + "}\n\n"
}

func usageOf(p, c int64) string {
	return fmt.Sprintf(`{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}`, p, p+c, c)
}

const sseDone = "data: [DONE]\n\n"

// TestUsageMetrics sends a streamed and a complete response through the
// handler: the stream still arrives chunk by chunk, and the counters hold
// the usage of both, plus one unknown for a response without usage.
func TestUsageMetrics(t *testing.T) {
	next := make(chan struct{})
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/v1/chat/completions": // streamed, continuous_usage_stats
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 {
				_, _ = io.WriteString(w, sseChunk("t", usageOf(100, int64(i+1))))
				w.(http.Flusher).Flush()
				select {
				case <-next:
				case <-r.Context().Done():
					return
				}
			}
			_, _ = io.WriteString(w, sseDone)
		case "/v1/completions":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"cmpl-1","choices":[{"text":"hi"}],"usage":`+usageOf(40, 7)+`}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"data":[]}`)
		}
	})
	tp := newTestProxy(t, pod, nil)

	res := post(t, tp.srv.URL, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`, nil)
	rd := bufio.NewReader(res.Body)
	for i := range 3 {
		want := sseChunk("t", usageOf(100, int64(i+1)))
		got := make([]byte, len(want))
		if _, err := io.ReadFull(rd, got); err != nil || string(got) != want {
			t.Fatalf("chunk %d = %q, %v; want %q", i, got, err, want)
		}
		next <- struct{}{}
	}
	if rest, _ := io.ReadAll(rd); string(rest) != sseDone {
		t.Fatalf("after the chunks: %q, want %q", rest, sseDone)
	}
	for _, path := range []string{"/v1/completions", "/v1/embeddings"} {
		res := post(t, tp.srv.URL, path, `{"model":"m","prompt":"x","input":"x"}`, nil)
		if _, err := io.Copy(io.Discard, res.Body); err != nil || res.StatusCode != 200 {
			t.Fatalf("POST %s = %d, %v", path, res.StatusCode, err)
		}
	}
	tp.close() // waits for the handlers to finish

	m := tp.h.metrics
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"prompt", testutil.ToFloat64(m.usedTokens.WithLabelValues("pod-0", "prompt")), 140},
		{"completion", testutil.ToFloat64(m.usedTokens.WithLabelValues("pod-0", "completion")), 10},
		{"unknown", testutil.ToFloat64(m.usageLost.WithLabelValues("pod-0")), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestUsageOnlyWhereResponsesCarryIt: GET /v1/models is not an unknown
// usage (its answer has none to read), and a 200 stream with an error event
// is the outcome stream_error and a failure for the pod's breaker, not served.
func TestUsageOnlyWhereResponsesCarryIt(t *testing.T) {
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/v1/models":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m"}]}`)
		default: // generation fails midway: vLLM's error event inside the 200
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, sseChunk("t", usageOf(5, 1)))
			_, _ = io.WriteString(w, `data: {"error":{"message":"engine died","type":"InternalServerError","code":500}}`+"\n\n")
			_, _ = io.WriteString(w, sseDone)
		}
	})
	tp := newTestProxy(t, pod, nil)
	res, err := http.Get(tp.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	res = post(t, tp.srv.URL, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`, nil)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	tp.close()
	if n := testutil.ToFloat64(tp.h.metrics.usageLost.WithLabelValues("pod-0")); n != 0 {
		t.Errorf("usage unknown = %v, want 0: /v1/models has no usage to read", n)
	}
	got := tp.outcomes(t)
	if got[decide.OutcomeStreamError] != 1 || got[decide.OutcomeServed] != 1 {
		t.Errorf("outcomes = %v, want one served (/v1/models) and one stream_error", got)
	}
	if r := tp.gate.got(); len(r) != 2 || r[1] != pods.Failure {
		t.Errorf("breaker results = %v, want the stream's failure last", r)
	}
}

// TestKnownSeriesStartAtZero checks that every series whose label values
// are known in advance exists at 0 before the first event, and that an
// upstream's response series go when it does.
func TestKnownSeriesStartAtZero(t *testing.T) {
	src, err := os.ReadFile("../decide/outcome.go")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(regexp.MustCompile(`(?m)^\tOutcome\w+ +Outcome = "`).FindAll(src, -1)); n != len(decide.Outcomes) {
		t.Errorf("outcome.go declares %d outcomes, decide.Outcomes lists %d", n, len(decide.Outcomes))
	}
	if n := len(regexp.MustCompile(`(?m)^\tReason\w+ +Reason = "`).FindAll(src, -1)); n != len(decide.Reasons) {
		t.Errorf("outcome.go declares %d reasons, decide.Reasons lists %d", n, len(decide.Reasons))
	}

	m := NewMetrics(prometheus.NewPedanticRegistry())
	for _, tt := range []struct {
		name string
		c    prometheus.Collector
		want int
	}{
		{"gatekeeper_requests_total", m.requests, len(decide.Outcomes)},
		{"gatekeeper_rejections_total", m.rejections, len(decide.Reasons)},
		{"gatekeeper_decisions_total", m.decisions, 2 * len(decide.DecisionReasons)},
		{"gatekeeper_upstream_responses_total", m.upstreamRes, 0},
	} {
		if n := testutil.CollectAndCount(tt.c); n != tt.want {
			t.Errorf("%s: %d series at start, want %d", tt.name, n, tt.want)
		}
	}
	if v := testutil.ToFloat64(m.rejections.WithLabelValues(string(decide.ReasonDeadline))); v != 0 {
		t.Errorf("rejections{reason=deadline} = %v, want 0", v)
	}

	m.UpstreamsSet([]string{"a", "b"}, nil)
	m.Response("b", 503)
	if n := testutil.CollectAndCount(m.upstreamRes); n != 2*len(statusClasses) {
		t.Errorf("two upstreams: %d response series, want %d", n, 2*len(statusClasses))
	}
	m.UpstreamsSet([]string{"a"}, []string{"b"})
	if n := testutil.CollectAndCount(m.upstreamRes); n != len(statusClasses) {
		t.Errorf("b removed: %d response series, want %d", n, len(statusClasses))
	}
	if v := testutil.ToFloat64(m.upstreamRes.WithLabelValues("a", "5xx")); v != 0 {
		t.Errorf(`upstream_responses{upstream="a",status_class="5xx"} = %v, want 0`, v)
	}
}

// The per-request series are resolved once per pod UpstreamsSet declares
// and per outcome: recording through them counts on the exported series and
// costs no allocation; a pod removed is forgotten, its series deleted (the
// cache holds the declared pods only); one never declared is still counted.
func TestMetricsSeriesPerPod(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	m.UpstreamsSet([]string{"a", "b"}, nil)
	record := func(pod string) {
		m.Waited(100, time.Millisecond)
		m.Sent(pod, 10)
		m.firstByte(pod, time.Millisecond)
		m.Response(pod, 200)
		m.Response(pod, 0)
		m.Usage(pod, usage.Tokens{Prompt: 7, Completion: 3, Known: true})
		m.Usage(pod, usage.Tokens{})
		m.Outcome(decide.OutcomeServed, time.Millisecond)
	}
	if n := testing.AllocsPerRun(100, func() { record("a") }); n != 0 {
		t.Errorf("recording a declared pod's request: %v allocations, want 0", n)
	}
	record("c")                                                   // never declared
	for pod, runs := range map[string]float64{"a": 101, "c": 1} { // AllocsPerRun runs it once more
		for name, got := range map[string]float64{
			"tokens": testutil.ToFloat64(m.tokens.WithLabelValues(pod)),
			"2xx":    testutil.ToFloat64(m.upstreamRes.WithLabelValues(pod, "2xx")),
			"error":  testutil.ToFloat64(m.upstreamRes.WithLabelValues(pod, "error")),
			"prompt": testutil.ToFloat64(m.usedTokens.WithLabelValues(pod, "prompt")),
			"lost":   testutil.ToFloat64(m.usageLost.WithLabelValues(pod)),
		} {
			want := map[string]float64{"tokens": 10, "2xx": 1, "error": 1, "prompt": 7, "lost": 1}[name] * runs
			if got != want {
				t.Errorf("pod %s: %s = %v, want %v", pod, name, got, want)
			}
		}
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues(string(decide.OutcomeServed))); got != 102 {
		t.Errorf("served requests = %v, want 102", got)
	}
	m.UpstreamsSet([]string{"b"}, []string{"a"})
	if m.upstream("a") != nil || m.upstream("b") == nil || len(*m.series.upstreams.Load()) != 1 {
		t.Errorf("after removing a: cached a %v, b %v, %d in all; want b alone", m.upstream("a"), m.upstream("b"),
			len(*m.series.upstreams.Load()))
	}
	for name, c := range map[string]prometheus.Collector{"tokens": m.tokens, "ttfb": m.ttfb, "lost": m.usageLost,
		"used": m.usedTokens, "responses": m.upstreamRes} {
		want := map[string]int{"used": 4, "responses": len(statusClasses) + 2}[name] // b's; c's recorded ones
		if want == 0 {
			want = 2
		}
		if n := testutil.CollectAndCount(c); n != want {
			t.Errorf("%s: %d series after removing a, want %d (b's and c's)", name, n, want)
		}
	}
}
