package epp

import (
	"strings"
	"testing"
)

// benchChatBody is a chat body of about 1 KiB, as bench/run's driver sends
// (one user message of filler text): long enough for prefix blocks.
var benchChatBody = []byte(`{"model":"m","messages":[{"role":"user","content":"` +
	strings.Repeat("The quick brown fox jumps over the lazy dog. ", 21) + `"}],"max_tokens":64,"stream":false}`)

// BenchmarkCoreDecider is the decision core's own share of an exchange,
// what the picker adds to the floor, without gRPC: the Decider over the
// core (benchCore: four pods, no limits, pod scoring) deciding on the
// request envoyExchange's headers and body make, and the pick's Done with
// a complete 200. "fresh" runs each decision on a goroutine of its own, as
// the server runs each stream: its stack starts small and grows by copying.
// "1KiB" decides on benchChatBody, whose prefix blocks are hashed and
// scored.
func BenchmarkCoreDecider(b *testing.B) {
	in, _ := envoyExchange()
	b.Run("warm", func(b *testing.B) { benchmarkCoreDecider(b, in[1].GetRequestBody().GetBody(), false) })
	b.Run("fresh", func(b *testing.B) { benchmarkCoreDecider(b, in[1].GetRequestBody().GetBody(), true) })
	b.Run("1KiB/warm", func(b *testing.B) { benchmarkCoreDecider(b, benchChatBody, false) })
	b.Run("1KiB/fresh", func(b *testing.B) { benchmarkCoreDecider(b, benchChatBody, true) })
}

func benchmarkCoreDecider(b *testing.B, body []byte, fresh bool) {
	dec := benchCore(b, 4)
	in, _ := envoyExchange()
	template := requestOf(in[0].GetRequestHeaders().GetHeaders().GetHeaders())
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
	b.ReportAllocs()
	done := make(chan struct{})
	for b.Loop() {
		if !fresh {
			decide()
			continue
		}
		go func() {
			decide()
			done <- struct{}{}
		}()
		<-done
	}
}
