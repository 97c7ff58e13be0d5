package epp

import (
	"testing"
)

// BenchmarkCoreDecider is the decision core's own share of an exchange, the
// part the picker adds to the floor, without gRPC: the Decider over the
// core (benchCore: four pods, no limits, pod scoring) deciding on the
// request envoyExchange's headers and body make, and the pick's Done with
// a complete 200.
func BenchmarkCoreDecider(b *testing.B) {
	dec := benchCore(b, 4)
	in, _ := envoyExchange()
	template := requestOf(in[0].GetRequestHeaders().GetHeaders().GetHeaders())
	body := in[1].GetRequestBody().GetBody()
	b.ReportAllocs()
	for b.Loop() {
		r := *template
		r.Body = body
		p, rf := dec.Decide(b.Context(), &r)
		if p == nil {
			b.Fatalf("refused: %+v", rf)
		}
		p.Done(End{Status: 200, Complete: true})
	}
}

func BenchmarkCoreDeciderGoroutine(b *testing.B) {
	dec := benchCore(b, 4)
	in, _ := envoyExchange()
	template := requestOf(in[0].GetRequestHeaders().GetHeaders().GetHeaders())
	body := in[1].GetRequestBody().GetBody()
	b.ReportAllocs()
	done := make(chan struct{})
	for b.Loop() {
		go func() {
			r := *template
			r.Body = body
			p, _ := dec.Decide(b.Context(), &r)
			p.Done(End{Status: 200, Complete: true})
			done <- struct{}{}
		}()
		<-done
	}
}
func BenchmarkEmptyGoroutine(b *testing.B) {
	done := make(chan struct{})
	for b.Loop() {
		go func() {
			done <- struct{}{}
		}()
		<-done
	}
}
