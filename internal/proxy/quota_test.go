package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/quota"
)

// quotaPod answers like vLLM with the usage (or status) it is set to, as
// JSON or as an SSE stream with the usage in its last chunk.
type quotaPod struct {
	mu                 sync.Mutex
	status             int
	prompt, completion int64
}

func (p *quotaPod) set(status int, prompt, completion int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status, p.prompt, p.completion = status, prompt, completion
}

func (p *quotaPod) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	status, prompt, completion := p.status, p.prompt, p.completion
	p.mu.Unlock()
	if status != http.StatusOK {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"error":{"message":"busy"}}`)
		return
	}
	usage := fmt.Sprintf(`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, prompt, completion, prompt+completion)
	if strings.Contains(string(body), `"stream":true`) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"x","choices":[{"index":0,"delta":{"content":"hi"}}]}`+"\n\n")
		_, _ = io.WriteString(w, `data: {"id":"x","choices":[],`+usage+`}`+"\n\n")
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":"x","choices":[],`+usage+`}`)
}

// serveDirect runs one request through the Handler itself rather than over
// the test server: ServeHTTP returns only once the request is complete and
// its charges are trued up, whereas a client over the network may read the
// whole answer, and send its next request, just before.
func serveDirect(tp *testProxy, body string, hdr map[string]string) *http.Response {
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	tp.h.ServeHTTP(rec, req)
	return rec.Result()
}

// A client's quota is charged each request's estimate at admission and
// trued up to the pod's usage when the response ends, JSON or stream, so
// requests the estimates alone would refuse still pass; once the usage
// fills the minute, the next request gets 429 quota_exceeded with the
// Retry-After of the window, other clients are untouched, and a minute
// later it passes again. A request the pod refuses is given back.
func TestQuotaChargeAndTrueUp(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	var clock sync.Mutex
	tick := func(d time.Duration) { clock.Lock(); now = now.Add(d); clock.Unlock() }
	q, err := quota.New(quota.Settings{Now: func() time.Time { clock.Lock(); defer clock.Unlock(); return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SetLimits(quota.Limits{PerClient: quota.Limit{PerMinute: 1000}}); err != nil {
		t.Fatal(err)
	}
	pod := &quotaPod{}
	tp := newTestProxy(t, pod, func(o *testOptions) {
		o.Quotas = q
		o.Policy.Quotas = true
		o.Policy.ClientKeyHeader = "Authorization"
	})
	// An estimate of about 400 tokens: three of them would not fit 1000.
	body := `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":400}`
	stream := `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":400,"stream":true,"stream_options":{"include_usage":true}}`
	a := map[string]string{"Authorization": "Bearer a"}
	b := map[string]string{"Authorization": "Bearer b"}
	steps := []struct {
		name               string
		status             int
		prompt, completion int64
		body               string
		hdr                map[string]string
		advance            time.Duration
		want               int
	}{
		{name: "first, 30 used", status: 200, prompt: 10, completion: 20, body: body, hdr: a, want: 200},
		{name: "second, 60 used", status: 200, prompt: 10, completion: 20, body: body, hdr: a, want: 200},
		{name: "third fits after the true-ups", status: 200, prompt: 10, completion: 20, body: body, hdr: a, want: 200},
		{name: "a stream, trued up from its last chunk", status: 200, prompt: 10, completion: 20, body: stream, hdr: a, want: 200},
		{name: "the pod refuses: given back", status: 503, body: body, hdr: a, want: 503},
		{name: "the pod refuses again: given back", status: 503, body: body, hdr: a, want: 503},
		{name: "a heavy answer fills the minute", status: 200, prompt: 100, completion: 700, body: body, hdr: a, want: 200},
		{name: "over quota", status: 200, prompt: 10, completion: 20, body: body, hdr: a, want: 429},
		{name: "another client is untouched", status: 200, prompt: 10, completion: 20, body: body, hdr: b, want: 200},
		{name: "a minute later", status: 200, prompt: 10, completion: 20, body: body, hdr: a, advance: 61 * time.Second, want: 200},
	}
	for _, st := range steps {
		tick(st.advance)
		pod.set(st.status, st.prompt, st.completion)
		res := serveDirect(tp, st.body, st.hdr)
		got, _ := io.ReadAll(res.Body)
		if res.StatusCode != st.want {
			t.Fatalf("%s: status %d, want %d (%s)", st.name, res.StatusCode, st.want, got)
		}
		if st.want != http.StatusTooManyRequests {
			continue
		}
		ra, _ := strconv.Atoi(res.Header.Get("Retry-After"))
		if res.Header.Get("X-Gatekeeper-Reason") != "quota_exceeded" || ra < 1 || ra > 61 ||
			!strings.Contains(string(got), `"code":"quota_exceeded"`) || !strings.Contains(string(got), "1000 tokens per minute") {
			t.Fatalf("%s: reason %q, Retry-After %q, body %s; want quota_exceeded, 1..61 s (a charge expires at the end of its second), the quota named",
				st.name, res.Header.Get("X-Gatekeeper-Reason"), res.Header.Get("Retry-After"), got)
		}
	}
	if n := testutil.ToFloat64(tp.h.metrics.requests.WithLabelValues(string(decide.OutcomeQuotaExceeded))); n != 1 {
		t.Errorf("quota_exceeded outcomes = %v, want 1", n)
	}
	if n := testutil.ToFloat64(tp.h.metrics.decisions.WithLabelValues("quota_exceeded", "true")); n != 1 {
		t.Errorf("enforced quota decisions = %v, want 1", n)
	}
}

// In shadow mode a request over quota is charged and counted as a decision
// not enforced, and served.
func TestQuotaShadow(t *testing.T) {
	q, err := quota.New(quota.Settings{Now: func() time.Time { return time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SetLimits(quota.Limits{Models: map[string]quota.Limit{"m": {PerDay: 500}}}); err != nil {
		t.Fatal(err)
	}
	pod := &quotaPod{}
	pod.set(200, 100, 300)
	tp := newTestProxy(t, pod, func(o *testOptions) {
		o.Quotas = q
		o.Policy.Quotas, o.Policy.QuotaShadow = true, true
	})
	for i := range 3 { // 400 used, then 800: the third would be refused
		if res := serveDirect(tp, chatBody, nil); res.StatusCode != 200 {
			t.Fatalf("request %d: status %d, want 200 in shadow mode", i, res.StatusCode)
		}
	}
	if n := testutil.ToFloat64(tp.h.metrics.decisions.WithLabelValues("quota_exceeded", "false")); n != 1 {
		t.Errorf("shadow quota decisions = %v, want 1 (%+v)", n, q.Snapshot())
	}
	if used := q.Snapshot(); fmt.Sprint(used) == "" {
		t.Fatal("no snapshot")
	}
}
