package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
)

// openStreams is how many SSE streams BenchmarkOpenStreams holds open at once.
const openStreams = 1000

// firstEvent is the one event a held stream's pod sends before it waits.
const firstEvent = "data: {\"choices\":[{\"text\":\" tok\"}]}\n\n"

// BenchmarkOpenStreams measures the memory an open token stream costs the
// Handler (issue 16): it opens openStreams streams over loopback TCP, first
// from the client straight to a pod, then through the Handler, waits until
// each has delivered its first event, and reads the Go heap and goroutine
// stacks in use after a GC. The difference between the two, per stream, is
// what gatekeeper holds per open stream: gk-B/stream (heap-B/stream and
// stack-B/stream are its parts), and goroutines/stream how many goroutines
// it runs per stream. Run it with -benchtime=3x or so: each
// iteration opens 2 × openStreams streams. It runs with a prompt of a few
// words and with one of 4 KiB (bench/run's -prompt-bytes 4096): a request
// body gatekeeper kept for as long as the stream lasts shows in the second.
func BenchmarkOpenStreams(b *testing.B) {
	for _, prompt := range []struct{ name, text string }{
		{name: "prompt=9B", text: "Say hello"},
		{name: "prompt=4KiB", text: strings.Repeat("x", 4<<10)},
	} {
		body := `{"model":"m","prompt":"` + prompt.text + `","max_tokens":16,"stream":true}`
		b.Run(prompt.name, func(b *testing.B) { benchmarkOpenStreams(b, body) })
	}
}

// benchmarkOpenStreams is BenchmarkOpenStreams for streams whose requests
// send body.
func benchmarkOpenStreams(b *testing.B, body string) {
	var hold sync.WaitGroup // the pod's handlers wait for it
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, firstEvent)
		_ = http.NewResponseController(w).Flush()
		hold.Wait()
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	b.Cleanup(pod.Close)
	u, _ := url.Parse(pod.URL)
	rt := NewTransport(TransportSettings{MaxIdleConnsPerHost: openStreams})
	b.Cleanup(rt.CloseIdleConnections)
	h, err := newHandler(testOptions{
		Upstreams:    []pods.Pod{{Name: "pod", URL: u}},
		Admission:    newFakeAdmission(1<<16, "pod"),
		RoundTripper: rt,
	})
	if err != nil {
		b.Fatal(err)
	}
	gk := httptest.NewServer(h)
	b.Cleanup(gk.Close)
	client := &http.Transport{MaxIdleConnsPerHost: openStreams, DisableCompression: true}
	b.Cleanup(client.CloseIdleConnections)
	idle := func() { client.CloseIdleConnections(); rt.CloseIdleConnections() }

	var direct, proxied memUse
	for b.Loop() {
		direct = direct.add(holdStreams(b, client, pod.URL, body, &hold, idle))
		proxied = proxied.add(holdStreams(b, client, gk.URL, body, &hold, idle))
	}
	per := func(v int64) float64 { return float64(v) / float64(b.N*openStreams) }
	b.ReportMetric(per(proxied.heap)-per(direct.heap), "heap-B/stream")
	b.ReportMetric(per(proxied.stack)-per(direct.stack), "stack-B/stream")
	b.ReportMetric(per(proxied.heap+proxied.stack)-per(direct.heap+direct.stack), "gk-B/stream")
	// The goroutines an open stream adds through the Handler: its client
	// connection's two (net/http's server), and any its pod connection has.
	b.ReportMetric(per(proxied.goroutines)-per(direct.goroutines), "goroutines/stream")
}

// memUse is Go heap and stack bytes, and goroutines.
type memUse struct{ heap, stack, goroutines int64 }

func (m memUse) add(o memUse) memUse {
	return memUse{m.heap + o.heap, m.stack + o.stack, m.goroutines + o.goroutines}
}

// liveMemory is the heap still reachable after two GCs (the second empties
// sync.Pool's victim cache) and the goroutine stacks in use.
func liveMemory() memUse {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return memUse{heap: int64(m.HeapAlloc), stack: int64(m.StackInuse), goroutines: int64(runtime.NumGoroutine())}
}

// holdStreams opens openStreams streaming completions to base, each sending
// body, waits until every one has its first event, and returns the memory
// they added; then it lets the pod end them and waits until their
// goroutines are gone.
func holdStreams(b *testing.B, client *http.Transport, base, body string, hold *sync.WaitGroup, idle func()) memUse {
	b.Helper()
	goroutines := runtime.NumGoroutine()
	before := liveMemory()
	hold.Add(1)
	var opened, ended sync.WaitGroup
	opened.Add(openStreams)
	ended.Add(openStreams)
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	for range openStreams {
		go func() {
			defer ended.Done()
			ok := false
			defer func() {
				if !ok {
					opened.Done()
				}
			}()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions",
				strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.RoundTrip(req)
			if err != nil {
				b.Error(err)
				return
			}
			defer resp.Body.Close()
			var first [len(firstEvent)]byte
			if _, err := io.ReadFull(resp.Body, first[:]); err != nil || string(first[:]) != firstEvent {
				b.Errorf("first event %q, %v", first, err)
				return
			}
			ok = true
			opened.Done()
			_, _ = io.Copy(io.Discard, resp.Body)
		}()
	}
	opened.Wait()
	after := liveMemory()
	hold.Done()
	ended.Wait()
	idle()
	// The connection goroutines of both ends end as the closed connections
	// are noticed: poll for that (real sockets; there is nothing to wait on),
	// so that the next measurement starts from the same place.
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > goroutines && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	return memUse{heap: after.heap - before.heap, stack: after.stack - before.stack, goroutines: after.goroutines - before.goroutines}
}
