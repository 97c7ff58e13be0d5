package podconn

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkRoundTrip is one keep-alive exchange with a loopback pod (a
// small JSON body each way), through this transport and through
// http.Transport for comparison: allocations and time per exchange, the
// pod's side included.
func BenchmarkRoundTrip(b *testing.B) {
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"text":" hi"}],"usage":{"total_tokens":5}}`)
	}))
	b.Cleanup(pod.Close)
	for _, tt := range []struct {
		name string
		rt   interface {
			http.RoundTripper
			CloseIdleConnections()
		}
	}{
		{"podconn", &Transport{MaxIdleConnsPerHost: 64}},
		{"http.Transport", &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.Cleanup(tt.rt.CloseIdleConnections)
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequest("POST", pod.URL+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"x"}`))
				res, err := tt.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		})
	}
}
