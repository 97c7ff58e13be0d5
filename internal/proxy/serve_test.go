package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
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
func serveDirect(tp *testProxy, method, path, body string, hdr map[string]string) *http.Response {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	tp.h.ServeHTTP(rec, req)
	return rec.Result()
}

// TestTranslation is the proxy's part of the decision core's life: it
// renders each of Decide's results as HTTP (an admitted request forwarded,
// a refusal with its headers, the local models list, nothing for a client
// gone) and hands Finish the End of what the pod answered (its status, the
// usage of a JSON body or a stream's last chunk), recording the outcome
// Finish decides. The core's table itself is tested in package decide.
func TestTranslation(t *testing.T) {
	const stream = `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":400,"stream":true,"stream_options":{"include_usage":true}}`
	tests := []struct {
		name         string
		setup        func(*testOptions)
		drain        bool
		method, path string
		body         string
		pod          int // the pod's status
		want         int
		header       map[string]string // headers the answer must carry ("?": any value)
		wantBody     string            // a part of the body
		outcome      decide.Outcome
		used         int64 // the quota's use after: the usage; 0 given back or never charged
		podRefusals  int
	}{
		{name: "served, JSON usage", method: "POST", path: "/v1/chat/completions", body: chatBody, pod: 200, want: 200,
			outcome: decide.OutcomeServed, used: 30},
		{name: "served, the usage of a stream's last chunk", method: "POST", path: "/v1/chat/completions", body: stream, pod: 200, want: 200,
			header: map[string]string{"Content-Type": "text/event-stream"}, outcome: decide.OutcomeServed, used: 30},
		{name: "the pod's own 503, passed on", method: "POST", path: "/v1/chat/completions", body: chatBody, pod: 503, want: 503,
			header: map[string]string{"X-Gatekeeper-Reason": "upstream_overloaded", "Retry-After": "?"}, outcome: decide.OutcomeUpstreamOverloaded,
			used: 0, podRefusals: 1},
		{name: "a 5xx, passed on", method: "POST", path: "/v1/chat/completions", body: chatBody, pod: 500, want: 500,
			outcome: decide.OutcomeUpstreamError, used: 0},
		{name: "a refusal: the reason and Retry-After", method: "POST", path: "/v1/chat/completions", body: chatBody, drain: true, want: 503,
			header:   map[string]string{"X-Gatekeeper-Reason": "draining", "Retry-After": "?", "Content-Type": "application/json"},
			wantBody: `"code":"draining"`, outcome: decide.OutcomeDraining, used: 0},
		{name: "a 405 names the methods allowed", method: "GET", path: "/v1/chat/completions", want: 405,
			header: map[string]string{"Allow": "POST", "X-Gatekeeper-Reason": "bad_request"}, outcome: decide.OutcomeBadRequest, used: 0},
		{name: "a 413 closes the connection", method: "POST", path: "/v1/chat/completions", body: strings.Repeat(" ", 2048) + chatBody,
			setup: func(o *testOptions) { o.Policy.MaxBodyBytes = 1024 }, want: 413,
			header: map[string]string{"Connection": "close", "X-Gatekeeper-Reason": "bad_request"}, outcome: decide.OutcomeBadRequest, used: 0},
		{name: "the models list, from gatekeeper", method: "GET", path: "/v1/models",
			setup: func(o *testOptions) { o.Upstreams[0].Models = []string{"m"} }, want: 200,
			header: map[string]string{"Content-Type": "application/json"}, wantBody: `"id":"m"`, outcome: decide.OutcomeServed, used: 0},
		{name: "HEAD of the models list: no body", method: "HEAD", path: "/v1/models",
			setup: func(o *testOptions) { o.Upstreams[0].Models = []string{"m"} }, want: 200, outcome: decide.OutcomeServed, used: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := quota.New(quota.Settings{})
			if err != nil {
				t.Fatal(err)
			}
			if err := q.SetLimits(quota.Limits{Models: map[string]quota.Limit{"m": {PerMinute: 100000}}}); err != nil {
				t.Fatal(err)
			}
			pod := &quotaPod{}
			pod.set(tt.pod, 10, 20)
			var refusals []string
			tp := newTestProxy(t, pod, func(o *testOptions) {
				o.Quotas, o.Policy.Quotas = q, true
				o.OnPodRefused = func(name string) { refusals = append(refusals, name) }
				if tt.setup != nil {
					tt.setup(o)
				}
			})
			if tt.drain {
				tp.h.core.Drain()
			}
			res := serveDirect(tp, tt.method, tt.path, tt.body, nil)
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.want {
				t.Fatalf("%s %s = %d %s, want %d", tt.method, tt.path, res.StatusCode, body, tt.want)
			}
			for k, v := range tt.header {
				if got := res.Header.Get(k); v == "?" && got == "" || v != "?" && !strings.HasPrefix(got, v) {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if !strings.Contains(string(body), tt.wantBody) || tt.method == "HEAD" && len(body) != 0 {
				t.Errorf("body %s, want it to hold %s", body, tt.wantBody)
			}
			if n := tp.outcomes(t)[tt.outcome]; n != 1 {
				t.Errorf("outcome %s counted %v times, want 1 (%v)", tt.outcome, n, tp.outcomes(t))
			}
			used := q.Snapshot().Models["m"].Minute.Used
			if used != tt.used {
				t.Errorf("quota used %d, want %d", used, tt.used)
			}
			if len(refusals) != tt.podRefusals {
				t.Errorf("OnPodRefused calls %v, want %d", refusals, tt.podRefusals)
			}
			if tt.pod == 0 && tp.podHits.get() != 0 {
				t.Errorf("the pod saw %d requests, want 0", tp.podHits.get())
			}
			if got := tp.gate.got(); tt.pod != 0 && (len(got) != 1 || got[0] != map[int]pods.Result{200: pods.Success, 503: pods.Excluded, 500: pods.Failure}[tt.pod]) {
				t.Errorf("the pod's breaker heard %v", got)
			}
		})
	}
}
