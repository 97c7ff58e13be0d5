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

// TestBodiesLargerThanTheCopyBuffer checks that a response body longer than
// the reverse proxy's copy buffer (2 KiB for streams, 32 KiB otherwise)
// reaches the client unchanged, whichever buffer the request gets.
func TestBodiesLargerThanTheCopyBuffer(t *testing.T) {
	event := "data: " + strings.Repeat("x", 3*streamBufferSize) + "\n\n"
	for _, tt := range []struct {
		name, ct, body, req string
	}{
		{"stream", "text/event-stream", strings.Repeat(event, 20),
			`{"model":"m","prompt":"x","stream":true}`},
		{"json", "application/json", `{"text":"` + strings.Repeat("y", 3*copyBufferSize) + `"}`,
			`{"model":"m","prompt":"x"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.ct)
				_, _ = io.WriteString(w, tt.body)
			})
			tp := newTestProxy(t, pod, nil)
			res := post(t, tp.srv.URL, "/v1/completions", tt.req, nil)
			defer res.Body.Close()
			got, err := io.ReadAll(res.Body)
			if err != nil || string(got) != tt.body {
				t.Errorf("body: %d bytes, %v; want the pod's %d bytes", len(got), err, len(tt.body))
			}
		})
	}
}
