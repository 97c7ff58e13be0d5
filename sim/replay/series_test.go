package replay

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

func TestSeries(t *testing.T) {
	// the run OOMs, so the chart has OOM markers
	set := ooming(Gatekeeper, 5*time.Minute, 1)
	set.SeriesEvery = 10 * time.Second
	r, err := Run(set)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r.Series); n < 29 || n > 31 {
		t.Fatalf("%d samples in 5 min every 10 s, want 30", n)
	}
	last := r.Series[len(r.Series)-1]
	if last.OOMs == 0 || last.Window == 0 {
		t.Fatalf("last sample %+v: want OOMs and a window", last)
	}
	var c bytes.Buffer
	if err := WriteSeriesCSV(&c, r.Series); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(c.String(), "\n"); lines != len(r.Series)+1 || !strings.HasPrefix(c.String(), "seconds,alive,") {
		t.Fatalf("CSV has %d lines:\n%.200s", lines, c.String())
	}
	var s bytes.Buffer
	if err := WriteSeriesSVG(&s, "gatekeeper <5 min>", r.Series); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.String(), `stroke="red"`) {
		t.Fatal("SVG has no OOM marker")
	}
	d := xml.NewDecoder(&s)
	for {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
	}
}
