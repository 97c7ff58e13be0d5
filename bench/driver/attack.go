package main

import (
	"encoding/json"
	"net"
	"net/http"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim/traffic"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// attacker drives one target with vegeta. A vegeta Attacker serves one
// attack only (its end stops it for good), so each attack gets a new one;
// they share one HTTP client, which keeps the connections warm between them.
type attacker struct {
	name, url  string
	client     *http.Client
	satWorkers uint64 // closed-loop workers for saturation
}

func newAttacker(name, url string, satWorkers uint64) *attacker {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 10000, MaxIdleConns: 10000,
		IdleConnTimeout: 60 * time.Second, DisableCompression: true}
	return &attacker{name: name, url: url, satWorkers: satWorkers,
		client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// vegeta returns a fresh vegeta Attacker and pacer for rate req/s (0: as
// fast as satWorkers closed-loop workers go).
func (at *attacker) vegeta(rate int) (*vegeta.Attacker, vegeta.Pacer) {
	opts := []func(*vegeta.Attacker){vegeta.Client(at.client), vegeta.MaxBody(1 << 20)}
	if rate == 0 {
		opts = append(opts, vegeta.Workers(at.satWorkers), vegeta.MaxWorkers(at.satWorkers))
		return vegeta.NewAttacker(opts...), vegeta.Rate{Freq: 0}
	}
	return vegeta.NewAttacker(opts...), vegeta.Rate{Freq: rate, Per: time.Second}
}

// body is a completion request; stream asks for SSE.
func body(stream bool) []byte {
	// A struct of strings, ints and bools: Marshal cannot fail.
	b, _ := json.Marshal(traffic.CompletionRequest{Model: "m", Prompt: "Say hello to the benchmark", MaxTokens: 16, Stream: stream})
	return b
}

func targeter(url string, b []byte, h http.Header) vegeta.Targeter {
	if h == nil {
		h = http.Header{}
	}
	h.Set("Content-Type", "application/json")
	return vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodPost, URL: url + "/v1/completions", Body: b, Header: h})
}

// run attacks at rate req/s (0: as fast as the saturation workers go) for
// dur and adds what came back to s (which may be nil: a warm-up).
func (at *attacker) run(tr vegeta.Targeter, rate int, dur time.Duration, s *sample) {
	a, pacer := at.vegeta(rate)
	start := time.Now()
	for r := range a.Attack(tr, pacer, dur, at.name) {
		if s == nil {
			continue
		}
		s.sent++
		s.codes[int(r.Code)]++
		if r.Code >= 200 && r.Code < 300 && r.Error == "" {
			s.lat = append(s.lat, r.Latency)
		}
	}
	if s != nil {
		s.dur += time.Since(start)
	}
}

// runCode is run for the refusal path: it keeps the latencies of responses
// with status code instead of 2xx ones.
func (at *attacker) runCode(tr vegeta.Targeter, rate int, dur time.Duration, code uint16, s *sample) {
	a, pacer := at.vegeta(rate)
	start := time.Now()
	for r := range a.Attack(tr, pacer, dur, at.name) {
		s.sent++
		s.codes[int(r.Code)]++
		if r.Code == code {
			s.lat = append(s.lat, r.Latency)
		}
	}
	s.dur += time.Since(start)
}
