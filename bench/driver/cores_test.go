package main

import (
	"strings"
	"testing"
	"time"
)

// TestWriteCoresRatiosToNginx checks the cores table: each target's rate
// over the one named nginx, and "–" for every ratio when no target is.
func TestWriteCoresRatiosToNginx(t *testing.T) {
	s := func(ok int) *sample {
		x := newSample()
		for range ok {
			x.lat = append(x.lat, time.Millisecond)
		}
		x.sent, x.dur = ok, time.Second
		return x
	}
	ats := []*attacker{{name: "nginx"}, {name: "net/http"}}
	var b strings.Builder
	writeCores(&b, ats, []*sample{s(1000), s(500)})
	if !strings.Contains(b.String(), "| net/http | 500 | 0.50 | 1.000 | 1.000 | 100.00 |") {
		t.Errorf("table:\n%s", b.String())
	}
	b.Reset()
	writeCores(&b, ats[1:], []*sample{s(500)})
	if !strings.Contains(b.String(), "| net/http | 500 | – |") {
		t.Errorf("without nginx:\n%s", b.String())
	}
}
