package epp

import (
	"context"
	"errors"
	"io"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// staticDecider admits everything to one endpoint and counts nothing: the
// benchmark measures the transport, not a policy.
type staticDecider struct{}

func (staticDecider) Decide(context.Context, *Request) (*Pick, *Refusal) {
	return &Pick{Endpoints: []string{"10.0.0.1:8000"}, Done: func(End) {}}, nil
}
func (staticDecider) MaxBodyBytes() int64 { return 1 << 20 }
func (staticDecider) Ready() bool         { return true }

// scoredDecider admits everything to one endpoint with two fallbacks, and
// scores four: what a pick with endpoint_picker.fallbacks 2 and scores on
// writes.
type scoredDecider struct{ staticDecider }

func (scoredDecider) Decide(context.Context, *Request) (*Pick, *Refusal) {
	return &Pick{Endpoints: []string{"10.0.0.1:8000", "10.0.0.3:8000", "10.0.0.2:8000"},
		Scores: []EndpointScore{{"10.0.0.1:8000", 0.875}, {"10.0.0.3:8000", 0.75}, {"10.0.0.2:8000", 0.5}, {"10.0.0.4:8000", 0.125}},
		Done:   func(End) {}}, nil
}

// BenchmarkDecision is one full exchange over TCP loopback, both sides of
// it counted: a stream opened, a chat request's headers and body, the pick
// and the echoed body, a body-less response, the stream's end.
func BenchmarkDecision(b *testing.B) { benchmarkDecision(b, staticDecider{}) }

// BenchmarkDecisionScored is BenchmarkDecision with a pick of three
// endpoints and four scores.
func BenchmarkDecisionScored(b *testing.B) { benchmarkDecision(b, scoredDecider{}) }

func benchmarkDecision(b *testing.B, dec Decider) {
	client := benchClient(b, dec)
	in := []*extprocv3.ProcessingRequest{reqHeaders(false, "content-type", "application/json"), reqBody(chatBody, true)}
	resp := respHeaders(true, ":status", "200")
	b.ReportAllocs()
	for b.Loop() {
		if err := exchangeOnce(b.Context(), client, in, resp); err != nil {
			b.Fatal(err)
		}
	}
}

func exchangeOnce(ctx context.Context, client extprocv3.ExternalProcessorClient, in []*extprocv3.ProcessingRequest,
	resp *extprocv3.ProcessingRequest) error {
	stream, err := client.Process(ctx)
	if err != nil {
		return err
	}
	for _, m := range in {
		if err := stream.Send(m); err != nil {
			return err
		}
	}
	for range 2 { // the pick, the body
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
	if err := stream.Send(resp); err != nil {
		return err
	}
	if _, err := stream.Recv(); err != nil {
		return err
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		return errors.New("the stream did not end after the exchange")
	}
	return nil
}

// BenchmarkPickResponse is the server's own part of a pick's answer: the
// header mutation and the envoy.lb metadata, for one endpoint and for
// three endpoints with four scores.
func BenchmarkPickResponse(b *testing.B) {
	for name, dec := range map[string]Decider{"one": staticDecider{}, "scored": scoredDecider{}} {
		b.Run(name, func(b *testing.B) {
			p, _ := dec.Decide(b.Context(), nil)
			b.ReportAllocs()
			for b.Loop() {
				pickResponse(p, 120, nil)
			}
		})
	}
}

// BenchmarkDecisionCore is BenchmarkDecision over the decision core
// (benchCore: four pods, no limits), the picker bench/run measures.
func BenchmarkDecisionCore(b *testing.B) { benchmarkDecision(b, benchCore(b, 4)) }
