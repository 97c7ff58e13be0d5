package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestUnknownLengthStreamsFlush checks that every write of a streamed body
// (no Content-Length, any content type, SSE included) reaches the client at
// once, chunk by chunk. The pod holds each next chunk until the client has read the
// previous one: a buffering proxy would deadlock.
func TestUnknownLengthStreamsFlush(t *testing.T) {
	for _, ct := range []string{"text/event-stream", "text/event-stream; charset=utf-8", "application/x-ndjson", "application/json"} {
		t.Run(ct, func(t *testing.T) {
			next := make(chan struct{})
			pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", ct)
				for i := range 3 {
					fmt.Fprintf(w, "line %d\n", i)
					w.(http.Flusher).Flush()
					select {
					case <-next:
					case <-r.Context().Done():
						return
					}
				}
			})
			tp := newTestProxy(t, pod, nil)
			res := post(t, tp.srv.URL, "/v1/completions", `{"model":"m","prompt":"x","stream":true}`, nil)
			rd := bufio.NewReader(res.Body)
			for i := range 3 {
				line, err := rd.ReadString('\n')
				if want := fmt.Sprintf("line %d\n", i); err != nil || line != want {
					t.Fatalf("chunk %d = %q, %v; want %q", i, line, err, want)
				}
				next <- struct{}{}
			}
			if rest, _ := io.ReadAll(rd); strings.TrimSpace(string(rest)) != "" {
				t.Errorf("after the chunks: %q, want nothing", rest)
			}
		})
	}
}
