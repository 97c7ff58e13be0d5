package epp

import (
	"testing"
)

// BenchmarkCoreDecider is the decision core's own share of an exchange,
// what the picker adds to the floor, without gRPC: the Decider over the
// core (benchCore: four pods, no limits, pod scoring) deciding on the
// request envoyExchange's headers and body make, and the pick's Done with
// a complete 200. "fresh" runs each decision on a goroutine of its own, as
// the server runs each stream: its stack starts small and grows by copying.
func BenchmarkCoreDecider(b *testing.B) {
	dec := benchCore(b, 4)
	in, _ := envoyExchange()
	template := requestOf(in[0].GetRequestHeaders().GetHeaders().GetHeaders())
	body := in[1].GetRequestBody().GetBody()
	decide := func() {
		r := *template
		r.Body = body
		p, rf := dec.Decide(b.Context(), &r)
		if p == nil {
			b.Errorf("refused: %+v", rf)
			return
		}
		p.Done(End{Status: 200, Complete: true})
	}
	b.Run("warm", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			decide()
		}
	})
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		done := make(chan struct{})
		for b.Loop() {
			go func() {
				decide()
				done <- struct{}{}
			}()
			<-done
		}
	})
}
