// Command upstream is a zero-latency OpenAI-shaped server for the proxy
// benchmark: a JSON completion, or an SSE stream when the body asks for one.
// It does no work beyond reading the body, so what a proxy in front of it
// adds is what the benchmark sees. A request for the model "hold" is kept
// open until the client leaves or -hold passes (the queue measurement parks
// one request on a one-slot window with it). A request whose query names a
// chunk count (?chunks=200&interval=50ms&bytes=200) gets a chat stream paced
// like a decoding model instead (paced.go; the open-stream scenarios).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"
)

const completion = `{"id":"cmpl-bench","object":"text_completion","created":1,"model":"m",` +
	`"choices":[{"index":0,"text":" hello","finish_reason":"length"}],` +
	`"usage":{"prompt_tokens":4,"completion_tokens":16,"total_tokens":20}}`

// chunks is how many SSE events a stream carries before [DONE].
const chunks = 8

func main() {
	listen := flag.String("listen", "127.0.0.1:18000", "address")
	hold := flag.Duration("hold", 2*time.Minute, "longest a \"hold\" request is kept open")
	flag.Parse()
	chunk := []byte(`data: {"id":"cmpl-bench","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" tok","finish_reason":null}]}` + "\n\n")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("POST /v1/", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		if p, ok, err := paceOf(r.URL.Query()); ok {
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			streamPaced(w, r, p)
			return
		}
		if bytes.Contains(body, []byte(`"model":"hold"`)) {
			t := time.NewTimer(*hold)
			defer t.Stop()
			select {
			case <-r.Context().Done():
			case <-t.C:
			}
			return
		}
		if !bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", fmt.Sprint(len(completion)))
			_, _ = io.WriteString(w, completion)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		rc := http.NewResponseController(w)
		for range chunks {
			_, _ = w.Write(chunk)
			_ = rc.Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(os.Stderr, "upstream: ", 0)}
	log.Fatal(srv.Serve(ln))
}
