package pressure

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestHTTPSources(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	serve := func(path string, body []byte) {
		mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) })
	}
	serve("/vllm", testdata(t, "vllm-two-engines.txt"))
	serve("/dcgm", testdata(t, "dcgm-two-gpus.txt"))
	serve("/blocks", testdata(t, "memory-blocks.json"))
	serve("/broken", []byte("vllm:num_requests_waiting{engine=\"0\" 3\n"))
	serve("/big", bytes.Repeat([]byte("#\n"), maxMetricsBytes/2+1))
	serve("/bigjson", append([]byte(`[{"gpu_id":"0"}`), append(bytes.Repeat([]byte(" "), maxJSONBytes), ']')...))
	mux.HandleFunc("/down", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "loading", http.StatusServiceUnavailable) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := srv.Client()
	tests := []struct {
		name    string
		src     Source
		check   func(Reading) bool
		wantErr string
		wantIs  error
	}{
		{name: "vllm", src: newVLLMSource("v", srv.URL+"/vllm", c),
			check: func(r Reading) bool { return r.Values[Waiting] == 3 && r.Counters[PreemptionRate] == 11 }},
		{name: "dcgm", src: newDCGMSource("d", srv.URL+"/dcgm", c),
			check: func(r Reading) bool { return len(r.GPUs) == 2 && r.GPUs[1].Values[MemoryUsed] == 0.5 }},
		{name: "memory_blocks", src: newMemoryBlocksSource("m", srv.URL+"/blocks", c),
			check: func(r Reading) bool { return len(r.GPUs) == 1 && r.GPUs[0].Counters[AllocRetryRate] == 4 }},
		{name: "metrics body over 8 MiB", src: newVLLMSource("v", srv.URL+"/big", c), wantIs: ErrBodyTooLarge},
		{name: "json body over 1 MiB", src: newMemoryBlocksSource("m", srv.URL+"/bigjson", c), wantIs: ErrBodyTooLarge},
		{name: "status 503", src: newDCGMSource("d", srv.URL+"/down", c), wantErr: "status 503"},
		{name: "not metrics", src: newVLLMSource("v", srv.URL+"/blocks", c), wantIs: ErrNoMetrics},
		{name: "broken metrics", src: newVLLMSource("v", srv.URL+"/broken", c), wantErr: "pressure: parsing metrics"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rd, err := tt.src.Read(t.Context())
			switch {
			case tt.wantIs != nil:
				if !errors.Is(err, tt.wantIs) {
					t.Fatalf("Read() error = %v, want %v", err, tt.wantIs)
				}
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "pressure: ") {
					t.Fatalf("Read() error = %v, want %q", err, tt.wantErr)
				}
			case err != nil:
				t.Fatalf("Read() error = %v", err)
			case !tt.check(rd):
				t.Fatalf("Read() = %+v", rd)
			}
		})
	}
}

// TestMonitorOverHTTP points a Monitor's built-in sources at served
// captures and waits (on OnUpdate, not on a clock) until every source has
// answered: on a loaded machine one read can pass its 20 ms round's timeout,
// and the signals of the others are in before it (memory_used comes from
// memory_blocks too).
func TestMonitorOverHTTP(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	for path, file := range map[string]string{"/metrics": "vllm-two-engines.txt",
		"/dcgm": "dcgm-two-gpus.txt", "/blocks": "memory-blocks.json"} {
		body := testdata(t, file)
		mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) })
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	updates := make(chan State, 1)
	m, err := New(Settings{
		Interval:   20 * time.Millisecond,
		HTTPClient: srv.Client(),
		Sources:    []SourceSettings{{Kind: KindDCGM, URL: srv.URL + "/dcgm"}},
		Upstreams: []UpstreamSettings{{Name: "vllm-0", GPUs: []string{"GPU-aaa"}, Sources: []SourceSettings{
			{Kind: KindVLLM, URL: srv.URL + "/metrics"},
			{Kind: KindMemoryBlocks, URL: srv.URL + "/blocks"},
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
	rounds := 0
	for s := range updates {
		u := s.Upstreams[0]
		if len(u.Absent) > 0 || slices.ContainsFunc(s.Sources, func(src SourceState) bool { return !src.Up }) {
			if rounds++; rounds > 1000 { // 20 s of rounds: a source that never answers is a defect
				t.Fatalf("after %d rounds: sources %+v, absent %v", rounds, s.Sources, u.Absent)
			}
			continue
		}
		if u.Signals[MemoryUsed].Value != 0.9 || u.Signals[MemoryUsed].Source != "dcgm" || u.Signals[Waiting].Value != 3 {
			t.Errorf("signals = %+v", u.Signals)
		}
		return
	}
}
