package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
)

// BenchmarkStreamEventSizes streams eight SSE events of 300, 1,500 and
// 3,000 bytes through the Handler over loopback TCP, the pod flushing each
// and pacing them as tokens come (200 µs apart), and counts the Handler's
// socket writes per stream: what the stream copy buffer's size
// (streamBufferSize) costs when an event is larger than it.
func BenchmarkStreamEventSizes(b *testing.B) {
	for _, size := range []int{300, 1500, 3000} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			event := "data: {\"choices\":[{\"text\":\"" + strings.Repeat("x", size-40) + "\"}]}\n\n"
			pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				rc := http.NewResponseController(w)
				for range 8 {
					_, _ = io.WriteString(w, event)
					_ = rc.Flush()
					time.Sleep(200 * time.Microsecond) // the pace of tokens, not a wait for state
				}
				_, _ = io.WriteString(w, "data: [DONE]\n\n")
			}))
			b.Cleanup(pod.Close)
			u, _ := url.Parse(pod.URL)
			h, err := newHandler(testOptions{
				Upstreams:    []pods.Pod{{Name: "pod", URL: u}},
				Admission:    newFakeAdmission(1<<16, "pod"),
				RoundTripper: NewTransport(TransportSettings{}),
			})
			if err != nil {
				b.Fatal(err)
			}
			var writes atomic.Int64 // socket writes to the client
			gk := httptest.NewUnstartedServer(h)
			gk.Listener = SendListener(countingListener{gk.Listener, &writes})
			gk.Config.ConnContext = ConnContext
			gk.Start()
			b.Cleanup(gk.Close)
			tr := &http.Transport{DisableCompression: true}
			b.Cleanup(tr.CloseIdleConnections)
			client := &http.Client{Transport: tr}
			cpu0 := cpuTime(b)
			for b.Loop() {
				resp, err := client.Post(gk.URL+"/v1/completions", "application/json",
					strings.NewReader(`{"model":"m","prompt":"Say hello","max_tokens":16,"stream":true}`))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(writes.Load())/float64(b.N), "writes/op")
		})
	}
}
