package epp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// TestIncompleteEnds: every way an exchange ends before its response's end
// releases the pick exactly once, as incomplete, with what was read of the
// response so far.
func TestIncompleteEnds(t *testing.T) {
	tests := []struct {
		name     string
		response bool // the response's headers and a first chunk came
		end      func(e *envoy)
		want     End
	}{
		{name: "reset after the pick", end: func(e *envoy) { e.cancel() }},
		{name: "envoy closes before the response", end: func(e *envoy) { e.closed() }},
		{name: "reset mid-response", response: true, end: func(e *envoy) { e.cancel() },
			want: End{Status: 200, Served: "10.0.0.1:8000", PromptTokens: 7, CompletionTokens: 10, UsageKnown: true}},
		{name: "envoy closes mid-response", response: true, end: func(e *envoy) { e.closed() },
			want: End{Status: 200, Served: "10.0.0.1:8000", PromptTokens: 7, CompletionTokens: 10, UsageKnown: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, newFakeDecider(), Options{Now: stepClock()})
			e := h.open()
			e.send(reqHeaders(false), reqBody("{}", true))
			e.pick("2")
			e.body(requestSide, 2, true)
			if tt.response {
				e.send(served(respHeaders(false, ":status", "200", "content-type", "text/event-stream"), "10.0.0.1:8000"), respBody(sseUsage, false))
				e.recv()
				e.body(responseSide, len(sseUsage), false)
			}
			tt.end(e)
			tt.want.Duration = time.Second
			if got := h.dec.end(t); got != tt.want {
				t.Errorf("released with %+v, want %+v", got, tt.want)
			}
			h.dec.settled(t)
		})
	}
}

// TestSecondRequestOnStream: a stream that carries a new request releases
// the first as incomplete and serves the second in full.
func TestSecondRequestOnStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFakeDecider(), Options{})
	e := h.open()
	e.send(reqHeaders(false, "x-request-id", "first"), reqBody("{}", true))
	e.pick("2")
	e.body(requestSide, 2, true)
	e.send(respHeaders(false, ":status", "200"))
	e.recv()
	e.send(subset(reqHeaders(false, "x-request-id", "second"), "10.0.0.3:8000"), reqBody("{}", true))
	if got := h.dec.end(t); got.Complete || got.Status != 200 {
		t.Errorf("first released with %+v, want incomplete with status 200", got)
	}
	if got := e.pick("2"); got != "10.0.0.3:8000" {
		t.Errorf("second pick = %q, want 10.0.0.3:8000", got)
	}
	e.body(requestSide, 2, true)
	e.send(respHeaders(true, ":status", "201"))
	e.recv()
	if got := h.dec.end(t); !got.Complete || got.Status != 201 {
		t.Errorf("second released with %+v, want complete with status 201", got)
	}
	e.closed()
	h.dec.settled(t)
}

// TestClientGoneWhileQueued: Envoy resets the stream while the request
// waits in Decide; Decide returns (its ctx ended), nothing was handed out,
// so nothing is released.
func TestClientGoneWhileQueued(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFakeDecider(), Options{})
	e := h.open()
	e.send(reqHeaders(false, "x-test", testQueue), reqBody("{}", true))
	waitFor(t, h.dec.queued, "the request to queue")
	e.cancel()
	waitFor(t, h.dec.returned, "Decide to return")
	if handed, _, _ := h.dec.counts(); handed != 0 {
		t.Errorf("%d picks handed out, want none", handed)
	}
	h.dec.settled(t)
}

func waitFor(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("waited too long for %s", what)
	}
}

// TestConcurrentStreams: 1,000 streams at once each get their pick and
// release it, each exactly once.
func TestConcurrentStreams(t *testing.T) {
	t.Parallel()
	const streams = 1000
	h := newHarness(t, newFakeDecider(), Options{})
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for range streams {
		wg.Go(func() { errs <- oneExchange(h) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for range streams {
		if got := h.dec.end(t); !got.Complete {
			t.Fatalf("released with %+v, want complete", got)
		}
	}
	if handed, _, _ := h.dec.counts(); handed != streams {
		t.Errorf("%d picks handed out, want %d", handed, streams)
	}
	h.dec.settled(t)
}

// oneExchange plays a short exchange on its own stream, returning what went
// wrong rather than failing from its goroutine.
func oneExchange(h *harness) error {
	ctx, cancel := context.WithCancel(h.t.Context())
	defer cancel()
	stream, err := extprocv3.NewExternalProcessorClient(h.conn).Process(ctx)
	if err == nil {
		err = stream.Send(reqHeaders(false))
	}
	if err == nil {
		err = stream.Send(reqBody("{}", true))
	}
	for i := 0; err == nil && i < 2; i++ { // the pick, then the body
		_, err = stream.Recv()
	}
	if err == nil {
		err = stream.Send(respHeaders(true, ":status", "200"))
	}
	if err == nil {
		_, err = stream.Recv()
	}
	if err == nil {
		err = stream.CloseSend()
	}
	if err == nil {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		return fmt.Errorf("after the exchange: got %v, %w; want the stream's end", m, err)
	}
	return err
}
