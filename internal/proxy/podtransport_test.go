package proxy

import (
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"testing"
)

// TestPodTransportThroughTheHandler: through the Handler's own transport
// (podconn), a pod's 103 reaches the client before the answer, its
// trailers after the body, and sequential requests share one pod
// connection.
func TestPodTransportThroughTheHandler(t *testing.T) {
	var mu sync.Mutex
	remotes := map[string]int{} // the pod's view: requests per client connection
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		remotes[r.RemoteAddr]++
		mu.Unlock()
		w.Header().Set("Link", "</hint>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Trailer", "X-Usage")
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		w.Header().Set("X-Usage", "3")
	})
	tp := newTestProxy(t, pod, nil)
	for i := range 3 {
		var hints []string
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			hints = append(hints, http.StatusText(code)+" "+h.Get("Link"))
			return nil
		}}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodPost,
			tp.srv.URL+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"x","stream":true}`))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
			t.Fatalf("request %d = %d %q, %v", i, res.StatusCode, body, err)
		}
		if want := "Early Hints </hint>; rel=preload"; len(hints) != 1 || hints[0] != want {
			t.Errorf("request %d: 1xx = %q, want [%q]", i, hints, want)
		}
		if got := res.Trailer.Get("X-Usage"); got != "3" {
			t.Errorf("request %d: trailer X-Usage = %q, want 3", i, got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(remotes) != 1 {
		t.Errorf("pod connections = %v, want one for three sequential requests", remotes)
	}
}
