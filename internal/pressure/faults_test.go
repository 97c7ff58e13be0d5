package pressure

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestSourceFaults points each HTTP source at a faulty endpoint: gone, hung,
// answering garbage, or answering without end. Each Read fails with a
// pressure error, and none reads more than its body limit.
func TestSourceFaults(t *testing.T) {
	t.Parallel()
	var endlessBytes atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	mux.HandleFunc("/garbage", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("\x00\xff<html>502 Bad Gateway</html>{{{"))
	})
	mux.HandleFunc("/json-garbage", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`[{"gpu_id":"0","total_bytes":"lots"}`))
	})
	mux.HandleFunc("/endless", func(w http.ResponseWriter, r *http.Request) {
		line := bytes.Repeat([]byte("# filler comment line\n"), 1024)
		for r.Context().Err() == nil {
			n, err := w.Write(line)
			endlessBytes.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	// A port with nothing behind it: listen, note the address, close.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + l.Addr().String()
	l.Close()

	c := srv.Client()
	tests := []struct {
		name   string
		src    Source
		wantIs error
	}{
		{name: "vllm down", src: newVLLMSource("v", gone+"/metrics", c)},
		{name: "memory_blocks down", src: newMemoryBlocksSource("m", gone+"/blocks", c)},
		{name: "vllm hangs", src: newVLLMSource("v", srv.URL+"/hang", c), wantIs: context.DeadlineExceeded},
		{name: "memory_blocks hangs", src: newMemoryBlocksSource("m", srv.URL+"/hang", c), wantIs: context.DeadlineExceeded},
		{name: "vllm garbage", src: newVLLMSource("v", srv.URL+"/garbage", c)},
		{name: "memory_blocks garbage", src: newMemoryBlocksSource("m", srv.URL+"/garbage", c)},
		{name: "memory_blocks wrong types", src: newMemoryBlocksSource("m", srv.URL+"/json-garbage", c)},
		{name: "vllm endless body", src: newVLLMSource("v", srv.URL+"/endless", c), wantIs: ErrBodyTooLarge},
		{name: "memory_blocks endless body", src: newMemoryBlocksSource("m", srv.URL+"/endless", c), wantIs: ErrBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			timeout := 10 * time.Second // a bound for a broken build
			if tt.wantIs == context.DeadlineExceeded {
				timeout = 200 * time.Millisecond // the source's timeout, which the hang runs into
			}
			ctx, cancel := context.WithTimeout(t.Context(), timeout)
			defer cancel()
			_, err := tt.src.Read(ctx)
			if err == nil || !strings.HasPrefix(err.Error(), "pressure: ") {
				t.Fatalf("Read() error = %v, want a pressure error", err)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Fatalf("Read() error = %v, want %v", err, tt.wantIs)
			}
		})
	}
	srv.Close() // the endless handlers have returned
	// Two reads of at most 8 MiB + 1 each, plus what sat in socket buffers.
	if n := endlessBytes.Load(); n > 2*(maxMetricsBytes+8<<20) {
		t.Errorf("the endless endpoints wrote %d bytes, want reads bounded near %d each", n, maxMetricsBytes)
	}
}

// TestMonitorMarksFaultySourcesDown runs a Monitor whose upstream has one
// good source and one of each fault. The good one stays up and keeps its
// signal; every faulty one is reported down with its error, and the hung one
// fails at its own timeout without holding back the others.
func TestMonitorMarksFaultySourcesDown(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	good := testdata(t, "vllm-two-engines.txt")
	mux.HandleFunc("/good", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(good) })
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	mux.HandleFunc("/garbage", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{not json")) })
	mux.HandleFunc("/huge", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(append([]byte(`[`), bytes.Repeat([]byte(" "), maxJSONBytes+1)...))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	updates := make(chan State, 1)
	m, err := New(Settings{
		Interval:   20 * time.Millisecond,
		HTTPClient: srv.Client(),
		Upstreams: []UpstreamSettings{{Name: "pod", Sources: []SourceSettings{
			{Kind: KindVLLM, URL: srv.URL + "/good"},
			{Kind: KindVLLM, URL: srv.URL + "/hang", Name: "hang", Timeout: 100 * time.Millisecond},
			{Kind: KindMemoryBlocks, URL: srv.URL + "/garbage", Name: "garbage"},
			{Kind: KindMemoryBlocks, URL: srv.URL + "/huge", Name: "huge"},
		}}},
		OnUpdate: func(s State) {
			select {
			case updates <- s:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	}()
	for s := range updates {
		byName := map[string]SourceState{}
		for _, src := range s.Sources {
			byName[src.Name] = src
		}
		if byName["hang"].LastError == "" || byName["garbage"].LastError == "" || byName["huge"].LastError == "" ||
			!byName["pod/vllm"].Up {
			continue // not every source has answered yet
		}
		for _, n := range []string{"hang", "garbage", "huge"} {
			if byName[n].Up {
				t.Errorf("source %s is up: %+v", n, byName[n])
			}
		}
		if s.Upstreams[0].Signals[Waiting].Value != 3 {
			t.Errorf("good source %+v, signals %+v: want it up with its readings", byName["pod/vllm"], s.Upstreams[0].Signals)
		}
		return
	}
}
