package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/relief"
	"github.com/gatekeeper-dev/gatekeeper/sim"
	"github.com/gatekeeper-dev/gatekeeper/sim/server"
)

// exporterRelief is the exporter's answer to POST /v1/internal/empty_cache.
type exporterRelief struct {
	ReleasedBytes int64    `json:"released_bytes"`
	DurationS     *float64 `json:"duration_s"`
	Devices       []struct {
		GPUID          string `json:"gpu_id"`
		ReservedBefore int64  `json:"reserved_before_bytes"`
		ReservedAfter  int64  `json:"reserved_after_bytes"`
		ReleasedBytes  int64  `json:"released_bytes"`
	} `json:"devices"`
	Error string `json:"error"`
}

// answer is one response as the hook's client received it: the relief
// package reads and drops the body, so the test's transport keeps a copy.
type answer struct {
	header http.Header
	body   []byte
}

// TestReliefHookAgainstExporter: a relief hook, made by the real relief
// package as gatekeeper fires it, against the allocator exporter (fake
// torch, the golden scenario) with empty_cache on and a bearer token, as
// docs/exporter.md wires it. Without the token or with a wrong one: 401
// with WWW-Authenticate. With it: 200, bytes released, and the exporter's
// own /memory_blocks shows the reserved bytes the answer says. Once more
// within the exporter's interval: 429 with Retry-After.
func TestReliefHookAgainstExporter(t *testing.T) {
	const token = "relief-test-token"
	exp := startExporter(t, "--empty-cache", "--token", token, "--empty-cache-interval", "3600")

	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	answers := make(chan answer, 8)
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		res, err := base.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		_ = res.Body.Close()
		if err != nil {
			return nil, err
		}
		answers <- answer{header: res.Header, body: body}
		res.Body = io.NopCloser(bytes.NewReader(body))
		return res, nil
	})}
	results := make(chan relief.Result, 8)
	runner, err := relief.New(relief.Settings{Client: client, OnResult: func(r relief.Result) { results <- r }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- runner.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })

	// fire makes one hook call and returns its result and the body it got.
	fire := func(t *testing.T, headers map[string]string) (relief.Result, answer) {
		t.Helper()
		runner.Fire("critical", "vllm-0", []relief.Hook{{
			URL: exp + "/v1/internal/empty_cache", Headers: headers, Timeout: 10 * time.Second,
		}})
		var res relief.Result
		select {
		case res = <-results:
		case <-time.After(30 * time.Second):
			t.Fatal("no hook result in 30s")
		}
		if res.Status == 0 {
			t.Fatalf("hook = %+v, want an answer", res)
		}
		return res, <-answers
	}
	decode := func(t *testing.T, a answer) exporterRelief {
		t.Helper()
		var doc exporterRelief
		if err := json.Unmarshal(a.body, &doc); err != nil {
			t.Fatalf("answer %q: %v", a.body, err)
		}
		return doc
	}

	for _, tt := range []struct {
		name    string
		headers map[string]string
	}{
		{"no token", nil},
		{"wrong token", map[string]string{"Authorization": "Bearer not-" + token}},
		{"another scheme", map[string]string{"Authorization": "Basic " + token}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, a := fire(t, tt.headers)
			if res.Status != http.StatusUnauthorized || !errors.Is(res.Err, relief.ErrStatus) || res.Outcome() != "error" {
				t.Fatalf("hook = status %d, err %v, outcome %s; want 401, ErrStatus, error", res.Status, res.Err, res.Outcome())
			}
			if got := a.header.Get("WWW-Authenticate"); got != "Bearer" {
				t.Errorf("WWW-Authenticate = %q, want Bearer", got)
			}
			if doc := decode(t, a); doc.Error == "" || doc.ReleasedBytes != 0 {
				t.Errorf("answer = %s, want an error and nothing released", a.body)
			}
		})
	}

	auth := map[string]string{"Authorization": "Bearer " + token}
	t.Run("with the token", func(t *testing.T) {
		res, a := fire(t, auth)
		if res.Status != http.StatusOK || res.Err != nil || res.Outcome() != "ok" {
			t.Fatalf("hook = status %d, err %v, outcome %s; want 200 ok (body %s)", res.Status, res.Err, res.Outcome(), a.body)
		}
		doc := decode(t, a)
		if doc.ReleasedBytes <= 0 || doc.DurationS == nil || *doc.DurationS < 0 || len(doc.Devices) != 2 {
			t.Fatalf("answer = %s, want bytes released on GPUs 0 and 1 and a duration", a.body)
		}
		var sum int64
		after := map[string]int64{}
		for _, d := range doc.Devices {
			if d.ReleasedBytes != d.ReservedBefore-d.ReservedAfter || d.ReleasedBytes < 0 {
				t.Errorf("device %+v: released != before - after", d)
			}
			sum += d.ReleasedBytes
			after[d.GPUID] = d.ReservedAfter
		}
		if sum != doc.ReleasedBytes {
			t.Errorf("released_bytes = %d, want the devices' sum %d", doc.ReleasedBytes, sum)
		}
		// The exporter's figures agree: what the allocator still holds.
		var mb struct {
			MemoryBlocks []struct {
				GPUID         string `json:"gpu_id"`
				ReservedBytes int64  `json:"reserved_bytes"`
			} `json:"memory_blocks"`
		}
		if err := json.Unmarshal([]byte(fetch(t, exp+"/memory_blocks")), &mb); err != nil {
			t.Fatal(err)
		}
		for _, b := range mb.MemoryBlocks {
			if b.ReservedBytes != after[b.GPUID] {
				t.Errorf("/memory_blocks gpu %s reserved_bytes = %d, want %d as empty_cache answered", b.GPUID, b.ReservedBytes, after[b.GPUID])
			}
		}
	})

	t.Run("again within the interval", func(t *testing.T) {
		res, a := fire(t, auth)
		if res.Status != http.StatusTooManyRequests || !errors.Is(res.Err, relief.ErrStatus) {
			t.Fatalf("hook = status %d, err %v; want 429", res.Status, res.Err)
		}
		if s, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || s < 1 || s > 3600 {
			t.Errorf("Retry-After = %q, want whole seconds in [1, 3600]", a.header.Get("Retry-After"))
		}
		if doc := decode(t, a); doc.Error == "" {
			t.Errorf("answer = %s, want an error", a.body)
		}
	})
}

// TestReliefHookAgainstSimulator: the same hook against the simulated pod
// (sim/server on loopback), which serves the exporter's contract on its own
// port: the replay credits relief only through it (sim/replay's
// WithPolicy). After a request has left blocks cached, the answer releases
// them and says so in the exporter's shape.
func TestReliefHookAgainstSimulator(t *testing.T) {
	e, err := sim.New(sim.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(e, server.Settings{Speed: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	driven := make(chan error, 1)
	go func() { driven <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-driven })
	pod := httptest.NewServer(srv)
	t.Cleanup(pod.Close)
	res, err := pod.Client().Post(pod.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"`+strings.Repeat("tok ", 3000)+`","max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()

	results := make(chan relief.Result, 1)
	var body []byte
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		res, err := pod.Client().Transport.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		body, err = io.ReadAll(res.Body)
		_ = res.Body.Close()
		res.Body = io.NopCloser(bytes.NewReader(body))
		return res, err
	})}
	runner, err := relief.New(relief.Settings{Client: client, OnResult: func(r relief.Result) { results <- r }})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- runner.Run(rctx) }()
	t.Cleanup(func() { rcancel(); <-ran })
	runner.Fire("critical", "vllm-0", []relief.Hook{{URL: pod.URL + "/v1/internal/empty_cache", Timeout: 10 * time.Second}})
	var r relief.Result
	select {
	case r = <-results:
	case <-time.After(30 * time.Second):
		t.Fatal("no hook result in 30s")
	}
	var doc exporterRelief
	if r.Status != http.StatusOK || r.Err != nil || json.Unmarshal(body, &doc) != nil {
		t.Fatalf("hook = %+v, answer %s; want 200 in the exporter's shape", r, body)
	}
	if doc.ReleasedBytes <= 0 || doc.DurationS == nil || len(doc.Devices) != 1 ||
		doc.Devices[0].ReleasedBytes != doc.Devices[0].ReservedBefore-doc.Devices[0].ReservedAfter {
		t.Fatalf("answer = %s, want bytes released on one device, before − after", body)
	}
}
