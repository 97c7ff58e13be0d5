package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// pace is a paced stream's shape, chosen by the request's query string
// (?chunks=200&interval=50ms&bytes=200): the open-stream scenarios of
// bench/run use it to stream at a real decode pace. A request without
// "chunks" gets the zero-latency behaviour.
type pace struct {
	chunks   int           // content chunks before the usage chunk and [DONE]
	interval time.Duration // between two content chunks
	bytes    int           // size of one content event, "data: " to the blank line
}

// paceOf reads the shape from q; ok is false when q asks for none.
func paceOf(q url.Values) (p pace, ok bool, err error) {
	if q.Get("chunks") == "" {
		return pace{}, false, nil
	}
	p = pace{interval: 50 * time.Millisecond, bytes: 200}
	if p.chunks, err = strconv.Atoi(q.Get("chunks")); err != nil || p.chunks < 1 {
		return p, true, fmt.Errorf("upstream: chunks %q: want an integer ≥ 1", q.Get("chunks"))
	}
	if s := q.Get("interval"); s != "" {
		if p.interval, err = time.ParseDuration(s); err != nil || p.interval < 0 {
			return p, true, fmt.Errorf("upstream: interval %q: want a duration ≥ 0", s)
		}
	}
	if s := q.Get("bytes"); s != "" {
		if p.bytes, err = strconv.Atoi(s); err != nil || p.bytes < 0 || p.bytes > 1<<20 {
			return p, true, fmt.Errorf("upstream: bytes %q: want 0 to 1 MiB", s)
		}
	}
	return p, true, nil
}

// chatChunk is one chat.completion.chunk event of about n bytes (never less
// than the JSON around the content needs).
func chatChunk(n int) []byte {
	const head = `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"m",` +
		`"choices":[{"index":0,"delta":{"content":"`
	const tail = `"},"finish_reason":null}]}` + "\n\n"
	fill := max(n-len(head)-len(tail), 4)
	return []byte(head + " tok" + strings.Repeat("x", fill-4) + tail)
}

// usageChunk is the last event of a stream that asked for its usage, as
// vLLM sends it: no choices, the token counts.
const usageChunk = `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"m",` +
	`"choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":%d,"total_tokens":%d}}` + "\n\n"

// streamPaced sends p.chunks content events, one every p.interval (the
// first at once, the headers before it), then the usage event and [DONE].
// Event i goes out at start + i·interval: a late one is sent at once and
// the pace does not drift.
func streamPaced(w http.ResponseWriter, r *http.Request, p pace) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	chunk := chatChunk(p.bytes)
	start := time.Now()
	t := time.NewTimer(0)
	defer t.Stop()
	for i := range p.chunks {
		if wait := time.Until(start.Add(time.Duration(i) * p.interval)); wait > 0 {
			t.Reset(wait)
			select {
			case <-r.Context().Done():
				return
			case <-t.C:
			}
		}
		if _, err := w.Write(chunk); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
	_, _ = fmt.Fprintf(w, usageChunk, p.chunks, 1000+p.chunks)
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}
