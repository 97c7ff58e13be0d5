package interop

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// uvicornPolicy is gatekeeper in front of one pod on vLLM's serving stack,
// its /metrics read as a vllm source. The pod connection is never closed
// for idleness by gatekeeper (uvicorn's keep-alive closes it first), and
// the pressure level follows the pod's reading at once (hold 0s).
const uvicornPolicy = `
server: {listen: "127.0.0.1:0", admin_listen: "127.0.0.2:0", drain_delay: 0s, shutdown_timeout: 2s}
upstreams:
  - name: uvicorn
    url: %[1]q
    max_inflight: 8
    min_inflight: 1
    sources: [{kind: vllm, url: "%[1]s/metrics"}]
transport: {idle_conn_timeout: 1h}
health_check: {interval: 1h, timeout: 1s}
pressure: {interval: 100ms, stale_after: 1s, hold: 0s}
fast_breaker: {qps: 0}
`

// podKeepAlive is the pod's uvicorn timeout_keep_alive, in seconds: vLLM's
// is 5; 1 makes the keep-alive scenario short.
const podKeepAlive = 1

// TestUvicornPod puts gatekeeper in front of a pod on the stack vLLM serves
// with (interop/vllm_app.py: FastAPI under uvicorn, /metrics from
// prometheus_client), once on each of uvicorn's HTTP/1.1 implementations:
// httptools, which vLLM installs, and h11, uvicorn's fallback. gatekeeper's
// pod transport and its metrics parser are its own, so they are held to
// what that stack sends and expects: answers and streams relayed, usage
// read, the connection kept alive and its close by uvicorn seen before a
// request is sent on it, the pod's errors passed on, a client that leaves
// ending the pod's generation (vLLM's with_cancellation and Starlette's
// stream cancellation see gatekeeper close the connection), a pod that
// dies mid-stream, and the KV-cache reading degrading the pod.
func TestUvicornPod(t *testing.T) {
	py := requireUvicorn(t)
	bin := buildGatekeeper(t)
	for _, impl := range []string{"httptools", "h11"} {
		t.Run(impl, func(t *testing.T) {
			pod := startUvicornPod(t, py, impl)
			gk, admin := startGatekeeper(t, bin, fmt.Sprintf(uvicornPolicy, pod.url))
			testUvicornRelay(t, gk, admin, pod)
			testUvicornKeepAlive(t, gk, pod)
			testUvicornErrors(t, gk, pod)
			testUvicornWindow(t, gk, pod)
			testUvicornClientLeaves(t, gk, admin, pod)
			testUvicornPodDies(t, gk, admin, pod)
			testUvicornPressure(t, admin, pod)
		})
	}
}

func testUvicornRelay(t *testing.T, gk, admin string, pod *uvicornPod) {
	t.Run("answers and streams relayed, usage read", func(t *testing.T) {
		const tokens, unknown = `gatekeeper_tokens_total{type="completion",upstream="uvicorn"}`, `gatekeeper_usage_unknown_total{upstream="uvicorn"}`
		tokens0, unknown0 := counter(t, admin, tokens), counter(t, admin, unknown)
		chat := `"messages":[{"role":"user","content":"Hello there, how are you?"}]`
		for _, tt := range []struct {
			name, path, body string
			events           int      // data lines, [DONE] included; 0: a JSON answer
			header           []string // the request's extra header, name then value
		}{
			{"completion", "/v1/completions", `{"model":"test-model","prompt":"Once upon a time","max_tokens":8}`, 0, nil},
			// gatekeeper meets the expectation itself; passed on, uvicorn's
			// own 100 reached the client too and took the request id off.
			{"completion with Expect: 100-continue", "/v1/completions",
				`{"model":"test-model","prompt":"Once upon a time","max_tokens":8}`, 0, []string{"Expect", "100-continue"}},
			{"chat", "/v1/chat/completions", `{"model":"test-model",` + chat + `,"max_tokens":8}`, 0, nil},
			{"completion stream", "/v1/completions", `{"model":"test-model","prompt":"Once upon a time","max_tokens":8,"stream":true}`, 9, nil},
			{"chat stream with usage", "/v1/chat/completions",
				`{"model":"test-model",` + chat + `,"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}`, 10, nil},
		} {
			t.Run(tt.name, func(t *testing.T) {
				direct := post(t, pod.url+tt.path, tt.body, tt.header...)
				via := post(t, gk+tt.path, tt.body, tt.header...)
				if via.status != http.StatusOK || direct.status != http.StatusOK {
					t.Fatalf("status = %d through gatekeeper, %d direct; want 200", via.status, direct.status)
				}
				id := via.header.Get("X-Request-Id")
				st := pod.state(t)
				if id == "" || !slices.Contains(st.Completed, id) {
					t.Errorf("X-Request-Id %q: the pod did not complete a request with gatekeeper's id", id)
				}
				if slices.Contains(st.Expected, id) {
					t.Errorf("the pod got the client's Expect header")
				}
				// The pod names its answer after the request's X-Request-Id
				// (none when asked directly); the rest must be the pod's bytes.
				if got := strings.ReplaceAll(via.body, id, ""); got != direct.body {
					t.Errorf("through gatekeeper:\n%s\nwant the pod's own answer:\n%s", via.body, direct.body)
				}
				if n := strings.Count(via.body, "data: "); n != tt.events {
					t.Errorf("%d data lines, want %d", n, tt.events)
				}
			})
		}
		// Usage is in the three answers and the stream that asked for it
		// (8 words each); the other stream has none. gatekeeper counts an
		// exchange once its answer is out.
		waitFor(t, 10*time.Second, "32 completion tokens counted and one answer's usage unknown", func() bool {
			return counter(t, admin, tokens)-tokens0 == 32 && counter(t, admin, unknown)-unknown0 == 1
		})
	})
}

func testUvicornKeepAlive(t *testing.T, gk string, pod *uvicornPod) {
	t.Run("connection kept alive, and uvicorn's close of it seen before the next request", func(t *testing.T) {
		body := `{"model":"test-model","prompt":"keep alive","max_tokens":2}`
		first := post(t, gk+"/v1/completions", body)
		second := post(t, gk+"/v1/completions", body)
		st := pod.state(t)
		port1, port2 := st.Clients[first.header.Get("X-Request-Id")], st.Clients[second.header.Get("X-Request-Id")]
		if first.status != 200 || second.status != 200 || port1 == 0 || port1 != port2 {
			t.Fatalf("two requests in a row: %d on client port %d, %d on %d; want 200s on one kept-alive connection",
				first.status, port1, second.status, port2)
		}
		// uvicorn closes the connection after podKeepAlive idle seconds; wait
		// until gatekeeper's end of it has the pod's FIN.
		waitFor(t, 10*time.Second, "uvicorn to close the idle pod connection", func() bool {
			return !tcpEstablished(t, port1, pod.port)
		})
		third := post(t, gk+"/v1/completions", body)
		port3 := pod.state(t).Clients[third.header.Get("X-Request-Id")]
		if third.status != 200 || port3 == port1 || port3 == 0 {
			t.Errorf("after uvicorn's close: %d on client port %d (closed: %d); want 200 on a new connection", third.status, port3, port1)
		}
	})
}

func testUvicornErrors(t *testing.T, gk string, pod *uvicornPod) {
	t.Run("the pod's errors passed on as its own", func(t *testing.T) {
		huge := `{"model":"test-model","max_tokens":1,"prompt":"` + strings.Repeat("a", 4<<20) + `"}`
		for _, tt := range []struct {
			name, body string
			status     int
		}{
			{"unknown model", `{"model":"no-such-model","prompt":"x","max_tokens":1}`, http.StatusNotFound},
			{"4 MiB prompt past the context length", huge, http.StatusBadRequest},
		} {
			t.Run(tt.name, func(t *testing.T) {
				direct := post(t, pod.url+"/v1/completions", tt.body)
				via := post(t, gk+"/v1/completions", tt.body)
				if via.status != tt.status || via.body != direct.body {
					t.Errorf("through gatekeeper %d %s\nwant the pod's %d %s", via.status, via.body, direct.status, direct.body)
				}
				if r := via.header.Get("X-Gatekeeper-Reason"); r != "" {
					t.Errorf("X-Gatekeeper-Reason = %q on the pod's own answer", r)
				}
				id := via.header.Get("X-Request-Id")
				if n := pod.state(t).BodyBytes[id]; n != len(tt.body) {
					t.Errorf("the pod read %d body bytes, want %d", n, len(tt.body))
				}
			})
		}
	})
}

// testUvicornWindow sends 32 requests of 100 ms at once after the light
// traffic of the subtests before it: all are served (the deadline check
// once refused half of them, predicting from the arrival rate of that
// light traffic; queue's "a burst after a quiet spell"), and the pod never
// runs more than gatekeeper's window.
func testUvicornWindow(t *testing.T, gk string, pod *uvicornPod) {
	const n, window = 32, 8 // window: uvicornPolicy's max_inflight
	t.Run("the window holds at the pod: 32 requests at once, at most 8 running there", func(t *testing.T) {
		waitFor(t, 10*time.Second, "the pod to be idle", func() bool { return pod.state(t).Inflight == 0 })
		post(t, pod.url+"/test/reset", "")
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				body := fmt.Sprintf(`{"model":"test-model","prompt":"window %d","max_tokens":20,"stream":%v}`, i, i%2 == 0)
				r, err := send(gk+"/v1/completions", body, "X-Test-Token-Delay-Ms", "5")
				if err == nil && r.status != http.StatusOK {
					err = fmt.Errorf("%d %s", r.status, r.body)
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
		}
		if most := pod.state(t).MaxInflight; most > window || most < 2 {
			t.Errorf("the pod ran at most %d at once; want 2 to %d (gatekeeper's window)", most, window)
		}
	})
}

func testUvicornClientLeaves(t *testing.T, gk, admin string, pod *uvicornPod) {
	slow := map[string]string{"X-Test-Token-Delay-Ms": "20"} // 1,000 words: 20 s
	for _, tt := range []struct {
		name, body string
		stream     bool
	}{
		{"mid-stream", `{"model":"test-model","prompt":"leave","max_tokens":1000,"stream":true}`, true},
		{"while the pod computes its answer", `{"model":"test-model","prompt":"leave","max_tokens":1000}`, false},
	} {
		t.Run("a client that leaves "+tt.name+" ends the pod's generation", func(t *testing.T) {
			id := "leave-" + strings.Fields(tt.name)[0]
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, gk+"/v1/completions", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Request-Id", id)
			for k, v := range slow {
				req.Header.Set(k, v)
			}
			done := make(chan error, 1)
			go func() {
				res, err := http.DefaultClient.Do(req)
				if err == nil {
					defer res.Body.Close()
					if tt.stream { // leave after the first event
						_, err = bufio.NewReader(res.Body).ReadString('\n')
						cancel()
					}
				}
				done <- err
			}()
			if tt.stream {
				if err := <-done; err != nil {
					t.Fatalf("first event: %v", err)
				}
			} else {
				waitFor(t, 10*time.Second, "the pod to start the request", func() bool {
					return slices.Contains(pod.state(t).Started, id)
				})
				cancel()
				<-done
			}
			waitFor(t, 10*time.Second, "the pod to see its client gone", func() bool {
				return slices.Contains(pod.state(t).Aborted, id)
			})
			if slices.Contains(pod.state(t).Completed, id) {
				t.Errorf("the pod completed %s, want it cancelled", id)
			}
			waitFor(t, 10*time.Second, "gatekeeper to release the slot", func() bool {
				return gatekeeperInflight(t, admin) == 0
			})
		})
	}
}

func testUvicornPodDies(t *testing.T, gk, admin string, pod *uvicornPod) {
	t.Run("a pod that dies mid-stream: the client's stream is cut, counted upstream_error", func(t *testing.T) {
		before := counter(t, admin, `gatekeeper_requests_total{outcome="upstream_error"}`)
		req, err := http.NewRequest(http.MethodPost, gk+"/v1/completions",
			strings.NewReader(`{"model":"test-model","prompt":"die","max_tokens":8,"stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Test-Fail-After", "2")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err == nil || res.StatusCode != http.StatusOK {
			t.Errorf("stream read = %d, err %v; want 200 and an error where the stream was cut", res.StatusCode, err)
		}
		if n := strings.Count(string(body), "data: "); n != 2 || strings.Contains(string(body), "[DONE]") {
			t.Errorf("client got %q; want the two events the pod sent, no [DONE]", body)
		}
		waitFor(t, 10*time.Second, "the cut stream to be counted", func() bool {
			return counter(t, admin, `gatekeeper_requests_total{outcome="upstream_error"}`) == before+1
		})
	})
}

func testUvicornPressure(t *testing.T, admin string, pod *uvicornPod) {
	t.Run("KV-cache usage read from prometheus_client degrades the pod, and its fall restores it", func(t *testing.T) {
		for _, step := range []struct {
			kv    string
			level string
		}{{"0.97", "degraded"}, {"0.10", "normal"}} {
			post(t, pod.url+"/test/kv?value="+step.kv, "")
			waitFor(t, 10*time.Second, "level "+step.level+" at kv_cache_usage "+step.kv, func() bool {
				return upstreamLevel(t, admin) == step.level
			})
		}
	})
}
