package main

import (
	"strings"
	"testing"
	"time"
)

// TestWriteCoresRatiosToNginx checks the cores table: each target's rate
// over the one named nginx, and "–" for every ratio when no target is.
func TestWriteCoresRatiosToNginx(t *testing.T) {
	s := okSample
	ats := []*attacker{{name: "nginx"}, {name: "net/http"}}
	var b strings.Builder
	writeCores(&b, ats, []*sample{s(1000), s(500)}, make([]coreCost, 2))
	if !strings.Contains(b.String(), "| net/http | 500 | 0.50 | – | – | – | 1.000 | 1.000 | 100.00 |") {
		t.Errorf("table:\n%s", b.String())
	}
	b.Reset()
	writeCores(&b, ats[1:], []*sample{s(500)}, make([]coreCost, 1))
	if !strings.Contains(b.String(), "| net/http | 500 | – |") {
		t.Errorf("without nginx:\n%s", b.String())
	}
}

// TestWriteCoresCPU checks the CPU columns: the proxy's CPU and the
// driver's and upstream's per request sent, summed over the rounds, the
// proxy's over nginx's, and "–" where a round went unmeasured.
func TestWriteCoresCPU(t *testing.T) {
	s := okSample
	measured := func(proxy, rest float64) coreCost {
		return coreCost{proxy: proxy, rest: rest, proxyKnown: true, restKnown: true}
	}
	var nginx, gk, half coreCost
	nginx.add(measured(0.01, 0.03)) // two rounds of 500 requests each
	nginx.add(measured(0.01, 0.03))
	gk.add(measured(0.02, 0.03))
	gk.add(measured(0.03, 0.04))
	half.add(measured(0.02, 0.03))
	half.add(coreCost{proxy: 0.02}) // /proc unreadable in the second round
	ats := []*attacker{{name: "nginx"}, {name: "gatekeeper"}, {name: "floor"}}
	var b strings.Builder
	writeCores(&b, ats, []*sample{s(1000), s(1000), s(1000)}, []coreCost{nginx, gk, half})
	for _, want := range []string{
		"| nginx | 1000 | 1.00 | 20.0 | 1.00 | 60.0 |",
		"| gatekeeper | 1000 | 1.00 | 50.0 | 2.50 | 70.0 |",
		"| floor | 1000 | 1.00 | – | – | – |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// okSample is a round of one second in which n requests were sent and all
// answered, each in a millisecond.
func okSample(n int) *sample {
	x := newSample()
	for range n {
		x.lat = append(x.lat, time.Millisecond)
	}
	x.sent, x.dur = n, time.Second
	return x
}
