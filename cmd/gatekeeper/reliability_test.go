package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// outcomeCounts reads gatekeeper_requests_total by outcome from the app's
// registry. Call it after the app stopped, so every handler has recorded.
func outcomeCounts(t *testing.T, a *app) map[string]int {
	t.Helper()
	mfs, err := a.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, mf := range mfs {
		if mf.GetName() != "gatekeeper_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					out[l.GetValue()] = int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return out
}

// streamingPod answers completions after a short service time, as a stream
// of three events and [DONE] when asked to stream.
func streamingPod(service time.Duration) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		time.Sleep(service) // the pod's service time, not a wait for state
		if !strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"%d\"}]}\n\n", i)
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
	return mux
}

// TestBurstLosesNothing is the short version of scripts/load/burst.sh: a
// burst far above what the fast breaker and the window admit. Every request
// gets a status line (a stream, its terminal event); every refusal is 429 or
// 503 with Retry-After; the outcome counters add up to what was sent.
func TestBurstLosesNothing(t *testing.T) {
	pod := newPodServer(t, streamingPod(2*time.Millisecond))
	traffic, _, a, stop := startApp(t, `
upstreams: [{name: pod, url: "`+pod+`", max_inflight: 4, min_inflight: 1}]
fast_breaker: {qps: 300, burst: 30}
queue: {max_length: 8, max_wait: 300ms, starvation_after: 100ms}
server: {drain_delay: 0s}
`)
	const sent, workers = 400, 32
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	codes := map[int]int{}
	var problems []string
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				stream := i%3 == 0
				body := fmt.Sprintf(`{"model":"m","prompt":"req %d","max_tokens":8,"stream":%t}`, i, stream)
				code, problem := burstOne(client, traffic, body, stream)
				mu.Lock()
				codes[code]++
				if problem != "" && len(problems) < 10 {
					problems = append(problems, problem)
				}
				mu.Unlock()
			}
		})
	}
	for i := range sent {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	for _, p := range problems {
		t.Error(p)
	}
	total := 0
	for code, n := range codes {
		total += n
		if code != 200 && code != 429 && code != 503 {
			t.Errorf("%d requests got %d, want only 200, 429 or 503", n, code)
		}
	}
	if total != sent || codes[200] == 0 || codes[429]+codes[503] == 0 {
		t.Errorf("statuses = %v, want %d in all, some served and some refused", codes, sent)
	}
	stop() // drains: every handler has recorded its outcome
	got := outcomeCounts(t, a)
	counted := 0
	for _, n := range got {
		counted += n
	}
	if counted != sent || got["served"] != codes[200] || got["rate_limited"] != codes[429] ||
		got["queue_full"]+got["queue_timeout"]+got["deadline"]+got["overloaded"] != codes[503] {
		t.Errorf("outcomes = %v, statuses = %v; want the counters to add up to the %d sent", got, codes, sent)
	}
	t.Logf("burst of %d: statuses %v, outcomes %v", sent, codes, got)
}

// burstOne sends one request and checks what came back. It returns the
// status (0 when no status line came) and a problem, if any.
func burstOne(c *http.Client, traffic, body string, stream bool) (int, string) {
	res, err := c.Post(traffic+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, "no status line: " + err.Error()
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	switch {
	case err != nil:
		return res.StatusCode, fmt.Sprintf("%d: body cut: %v", res.StatusCode, err)
	case res.StatusCode == 429 || res.StatusCode == 503:
		if res.Header.Get("Retry-After") == "" || res.Header.Get("X-Gatekeeper-Reason") == "" {
			return res.StatusCode, fmt.Sprintf("%d without Retry-After or reason: %v", res.StatusCode, res.Header)
		}
	case res.StatusCode == 200 && stream && !strings.HasSuffix(string(b), "data: [DONE]\n\n"):
		return res.StatusCode, fmt.Sprintf("stream without its terminal event: %q", b)
	}
	return res.StatusCode, ""
}

// TestClientLeavesMidStream: the client of a stream goes away; the pod's
// request is cancelled within a second, and the outcome is client_closed.
func TestClientLeavesMidStream(t *testing.T) {
	started := make(chan struct{}, 1)
	cancelled := make(chan time.Time, 1)
	pod := http.NewServeMux()
	pod.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	pod.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
		w.(http.Flusher).Flush()
		started <- struct{}{}
		<-r.Context().Done()
		cancelled <- time.Now()
	})
	traffic, _, a, stop := startApp(t, "upstreams: [{name: pod, url: '"+newPodServer(t, pod)+"'}]\nserver: {drain_delay: 0s}\n")
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, traffic+"/v1/completions",
		strings.NewReader(`{"model":"m","prompt":"x","stream":true}`))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	<-started
	left := time.Now()
	cancel()
	res.Body.Close()
	select {
	case at := <-cancelled:
		if d := at.Sub(left); d > time.Second {
			t.Errorf("the pod's request was cancelled %v after the client left, want within 1s", d)
		}
	case <-time.After(10 * time.Second): // a bound for a broken build
		t.Fatal("the pod's request was never cancelled")
	}
	stop()
	if got := outcomeCounts(t, a); got["client_closed"] != 1 {
		t.Errorf("outcomes = %v, want client_closed 1", got)
	}
}

// TestSlowlorisAndOversize: connections that dribble their headers are
// closed at server.read_header_timeout while other traffic is served;
// oversized headers get 431 and oversized bodies 413, neither reaching the pod.
func TestSlowlorisAndOversize(t *testing.T) {
	var mu sync.Mutex
	hits := 0
	pod := http.NewServeMux()
	pod.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	pod.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{}`)
	})
	traffic, _, _, _ := startApp(t, "upstreams: [{name: pod, url: '"+newPodServer(t, pod)+"'}]\n"+
		"server: {drain_delay: 0s, read_header_timeout: 300ms, max_header_bytes: 4096, max_body_bytes: 2048}\n")
	addr := strings.TrimPrefix(traffic, "http://")

	const lorises = 20
	conns := make([]net.Conn, lorises)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: gk\r\nX-Slow: ")
		conns[i] = c
	}
	// Other traffic is served while the slow connections hang on.
	for range 5 {
		res, err := http.Post(traffic+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("request beside the slow connections = %d, want 200", res.StatusCode)
		}
	}
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a bound; the server closes far sooner
		b, err := io.ReadAll(c)
		if err != nil {
			t.Errorf("slow connection %d: %v after %q, want the server to close it", i, err, b)
		}
		if len(b) > 0 && !strings.HasPrefix(string(b), "HTTP/1.1 408") {
			t.Errorf("slow connection %d got %q, want a close (or 408)", i, b)
		}
	}

	big := strings.Repeat("a", 16<<10)
	req, _ := http.NewRequest(http.MethodPost, traffic+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"x"}`))
	req.Header.Set("X-Big", big)
	if res, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		res.Body.Close()
		if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("16 KiB header = %d, want 431", res.StatusCode)
		}
	}
	for _, chunked := range []bool{false, true} {
		body := io.Reader(strings.NewReader(`{"model":"m","prompt":"` + big + `"}`))
		if chunked {
			body = io.MultiReader(body) // no length: sent chunked
		}
		res, err := http.Post(traffic+"/v1/completions", "application/json", body)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("16 KiB body (chunked %t) = %d, want 413", chunked, res.StatusCode)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if hits != 5 {
		t.Errorf("pod saw %d requests, want only the 5 ordinary ones", hits)
	}
}

// TestTrafficNeverWaitsOnASource: the pod's metrics source hangs. Requests
// are served while the source is still hanging.
func TestTrafficNeverWaitsOnASource(t *testing.T) {
	hang := make(chan struct{})
	entered := make(chan struct{}, 64)
	src := http.NewServeMux()
	src.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	})
	srcURL := newPodServer(t, src)
	t.Cleanup(func() { close(hang) }) // before the servers close
	pod := newPodServer(t, streamingPod(0))
	traffic, _, _, _ := startApp(t, `
upstreams:
  - name: pod
    url: "`+pod+`"
    sources: [{kind: vllm, url: "`+srcURL+`/metrics", timeout: 30s}]
pressure: {interval: 100ms, stale_after: 60s}
server: {drain_delay: 0s}
`)
	<-entered // the first poll is hanging
	for range 10 {
		res, err := http.Post(traffic+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("request while the source hangs = %d, want 200", res.StatusCode)
		}
	}
	select {
	case <-hang:
		t.Fatal("the source was released before the requests ended")
	default: // still hanging: nothing above waited on it
	}
}

// TestReloadUnderLoadLosesNothing: while requests flow, a valid edit that
// shrinks the window and then an invalid edit are loaded. Every request is
// answered in full (streams with their [DONE]); none is refused or cut.
func TestReloadUnderLoadLosesNothing(t *testing.T) {
	podURL := newPodServer(t, streamingPod(time.Millisecond))
	base := "upstreams: [{name: p, url: '" + podURL + "', max_inflight: MAX, min_inflight: 1}]\n" +
		"server: {drain_delay: 0s}\nfast_breaker: {qps: 0}\n"
	r := startLifecycle(t, strings.Replace(base, "MAX", "64", 1), nil)

	const workers, perWorker = 8, 150
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	codes := map[int]int{}
	var problems []string
	flowing := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				stream := i%3 == 0
				code, problem := burstOne(client, r.traffic,
					fmt.Sprintf(`{"model":"m","prompt":"w%d r%d","max_tokens":8,"stream":%t}`, w, i, stream), stream)
				once.Do(func() { close(flowing) })
				mu.Lock()
				codes[code]++
				if problem != "" && len(problems) < 10 {
					problems = append(problems, problem)
				}
				mu.Unlock()
			}
		})
	}
	<-flowing
	if err := os.WriteFile(r.path, []byte(strings.Replace(base, "MAX", "4", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	r.waitStage(t, "reloaded")
	if err := os.WriteFile(r.path, []byte(strings.Replace(base, "MAX", "-3", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	r.waitStage(t, "reload_refused")
	wg.Wait()
	for _, p := range problems {
		t.Error(p)
	}
	if codes[200] != workers*perWorker {
		t.Errorf("statuses = %v, want all %d answered 200", codes, workers*perWorker)
	}
	if st := fetch(t, r.admin+"/admin/state"); !strings.Contains(st, `"window_limit": 4`) {
		t.Errorf("after the reloads the window is not 4:\n%s", st)
	}
}
