package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// TestStatusPageInChromium opens the page in headless Chromium against a
// running app whose pod the test moves from normal to degraded before the
// page loads, then to critical while it runs, and checks that the page
// renders both changes without a console message of its own (pageConsole),
// then keeps a screenshot. GATEKEEPER_UPDATE_SCREENSHOT=1 copies it to
// testdata/statuspage.png. Beside the page's own script it loads
// testdata/statuspage-probe.js, which measures the rendered layout, and its
// /metrics carries refusals of every reason, so that every colour is shown
// (issue 35, item 13: ticks, overflow, colours, level changes).
func TestStatusPageInChromium(t *testing.T) {
	chromium := findChromium(t)
	src := &fakeAllocator{}
	pod := http.NewServeMux()
	pod.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	pod.HandleFunc("/v1/completions", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, `{"choices":[]}`) })
	pod.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.42\nvllm:num_requests_waiting{model_name=\"m\"} 3\n")
	})
	pod.Handle("/memory_blocks", src)
	ps := newPodServer(t, pod)
	traffic, _, a, _ := startApp(t, fmt.Sprintf(`
upstreams:
  - name: pod
    url: %[1]s
    max_inflight: 16
    min_inflight: 2
    gpus: ["0"]
    sources:
      - {kind: vllm, url: %[1]s/metrics}
      - {kind: memory_blocks, url: %[1]s/memory_blocks, name: %[2]q}
fast_breaker: {qps: 1, burst: 1}
health_check: {interval: 1h, timeout: 1s}
pressure: {interval: 100ms, stale_after: 1m, hold: 1m, rules: {fragmentation: {degrade: 1.2, shed: 1.5}}}  # no for: one round moves a level
server: {drain_delay: 0s}
`, ps, longSourceName))

	// Before the page loads, the allocator turns fragmented and the slow
	// breaker hears it, as after a monitor poll: the pod is degraded, a
	// change the page can only learn from gatekeeper's memory (the hold of
	// 1m keeps each level whatever the monitor reads later). The page polls
	// /admin/state once a second; before its second poll is answered the
	// pod goes critical. The third poll's moment brings real refusals.
	fragment := func(ratio float64) {
		src.ratio.Store(int64(ratio * 100))
		a.slow.Observe(pressure.State{Upstreams: []pressure.UpstreamState{{Name: "pod",
			Signals: map[pressure.Signal]pressure.Value{pressure.Fragmentation: {Value: ratio}}}}})
	}
	fragment(1.3) // degraded, below shed
	var polls, scrapes atomic.Int32
	ah := a.adminHandler()
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/admin/":
			servePageWithProbe(t, ah, w, r)
			return
		case "/admin/probe.js":
			w.Header().Set("Content-Type", "text/javascript")
			http.ServeFile(w, r, filepath.Join("testdata", "statuspage-probe.js"))
			return
		case "/metrics":
			serveMetricsWithRefusals(ah, w, r, int(scrapes.Add(1)))
			return
		case "/admin/state":
			switch polls.Add(1) {
			case 2:
				fragment(1.6) // critical
			case 3:
				for range 4 {
					res, err := http.Post(traffic+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hi"}`))
					if err == nil {
						_, _ = io.Copy(io.Discard, res.Body)
						res.Body.Close()
					}
				}
			}
		}
		ah.ServeHTTP(w, r)
	}))
	t.Cleanup(admin.Close)

	shot := filepath.Join(t.TempDir(), "statuspage.png")
	dom, logs := runChromium(t, chromium, admin.URL+"/admin/", shot)
	if n := polls.Load(); n < 3 {
		t.Fatalf("the page polled /admin/state %d times, want at least 3", n)
	}
	page, others := pageConsole(logs, admin.URL)
	for _, e := range page {
		t.Errorf("console message from the page: %s", e.text)
	}
	for _, e := range others {
		t.Logf("console message from elsewhere (not the page's): %s", e.text)
	}
	const before, during = "pod: normal → degraded by fragmentation 1.300", "pod: degraded → critical by fragmentation 1.600"
	for _, want := range []string{
		`data-upstream="pod" data-level="critical"`,      // the card
		`data-level="critical">critical</span>`,          // its badge
		during + "</li>",                                 // the level changes, newest first
		before + "</li>",                                 // the one before the page loaded, from gatekeeper's memory
		"degraded → critical by fragmentation 1.600</p>", // the card's last change
		`data-signal="fragmentation"`,
		`<strong>free_memory_bytes </strong><span class="value">16 GiB</span>`, // bytes as bytes
		longSourceName,                                                         // the name whose overflow the probe measures
		`<ul id="errors" hidden=""></ul>`,                                      // errors the page caught: none
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if i, j := strings.Index(dom, during+"</li>"), strings.Index(dom, before+"</li>"); i > j {
		t.Errorf("level changes are not newest first")
	}
	probe := readProbe(t, dom)
	if len(probe.FirstEvents) != 1 || !strings.HasSuffix(probe.FirstEvents[0], before) {
		t.Errorf("level changes at the first render = %q, want the change made before the page loaded (%q)", probe.FirstEvents, before)
	}
	for _, o := range probe.Overflow {
		t.Errorf("text outside its box: %s", o)
	}
	checkAxes(t, dom)
	checkRefusalColors(t, dom)
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}
	png, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 10_000 {
		t.Fatalf("screenshot is not a rendered PNG (%d bytes)", len(png))
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
	if os.Getenv("GATEKEEPER_UPDATE_SCREENSHOT") == "1" {
		if err := os.WriteFile(filepath.Join("testdata", "statuspage.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// longSourceName is a source named as gatekeeper names one by default
// (kind:url), here for a pod on an IPv6 address: nowhere a browser would
// break a line on its own (no space, no hyphen), and wider than a card.
const longSourceName = "memory_blocks:http://[fd00:10:244:1700:8a2f:3c1e:77b4:2c3]:8001/memory_blocks"

// futureReason is a refusal reason the page has no colour of its own for,
// as a newer gatekeeper might count.
const futureReason = "some_future_reason"

// allReasons are the refusal reasons gatekeeper counts, and futureReason.
func allReasons() []decide.Reason {
	return append(slices.Clone(decide.Reasons[:]), futureReason)
}

// servePageWithProbe serves the status page's index.html, headers and all,
// with testdata/statuspage-probe.js loaded after app.js.
func servePageWithProbe(t *testing.T, h http.Handler, w http.ResponseWriter, r *http.Request) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	const app = `<script src="app.js" defer></script>`
	body := rec.Body.String()
	if !strings.Contains(body, app) {
		t.Errorf("index.html lacks %s", app)
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.Header().Del("Content-Length")
	w.WriteHeader(rec.Code)
	_, _ = io.WriteString(w, strings.Replace(body, app, app+"\n"+`<script src="probe.js" defer></script>`, 1))
}

// serveMetricsWithRefusals serves /metrics with, after the app's own
// series, one refusal per scrape of every reason gatekeeper counts and of
// futureReason, in series of their own: the page sums a reason's series.
func serveMetricsWithRefusals(h http.Handler, w http.ResponseWriter, r *http.Request, scrape int) {
	r.Header.Del("Accept")          // the text format, which the page reads
	r.Header.Del("Accept-Encoding") // uncompressed, to append to
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	w.Header().Set("Content-Type", rec.Header().Get("Content-Type"))
	_, _ = w.Write(rec.Body.Bytes())
	for _, reason := range allReasons() {
		fmt.Fprintf(w, "gatekeeper_rejections_total{probe=\"1\",reason=%q} %d\n", reason, scrape)
	}
}

// probeResult is what testdata/statuspage-probe.js found.
type probeResult struct {
	FirstEvents []string `json:"firstEvents"` // the level changes listed at the first render
	Overflow    []string `json:"overflow"`    // text outside its box
}

func readProbe(t *testing.T, dom string) probeResult {
	t.Helper()
	m := regexp.MustCompile(`<pre id="probe" hidden="">([^<]*)</pre>`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the page has no probe result")
	}
	var p probeResult
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &p); err != nil {
		t.Fatalf("probe result %q: %v", m[1], err)
	}
	return p
}

var (
	canvasTag = regexp.MustCompile(`<canvas [^>]*>`)
	htmlAttr  = regexp.MustCompile(`([a-z-]+)="([^"]*)"`)
	// yLabel is a value tick: a plain number, or one with an SI or binary
	// prefix (bytes carry a unit).
	yLabel = regexp.MustCompile(`^-?\d+(?:\.\d+)?(?:k|M|G|T| B| KiB| MiB| GiB| TiB| PiB)?$`)
	xLabel = regexp.MustCompile(`^(?:now|(?:\d+m)?(?:\d+s)? ago)$`)
)

// checkAxes reads every chart's tick labels (data-y-ticks, data-x-ticks):
// a few round values, evenly spaced (none repeated), none below zero (no
// value in this test is), and times as "… ago" up to "now".
func checkAxes(t *testing.T, dom string) {
	t.Helper()
	charts := 0
	for _, tag := range canvasTag.FindAllString(dom, -1) {
		a := map[string]string{}
		for _, m := range htmlAttr.FindAllStringSubmatch(tag, -1) {
			a[m[1]] = html.UnescapeString(m[2])
		}
		name := a["aria-label"]
		if a["class"] == "strip" {
			continue // the level strip has no axes
		}
		charts++
		ys, xs := strings.Split(a["data-y-ticks"], "|"), strings.Split(a["data-x-ticks"], "|")
		if len(ys) < 2 || len(ys) > 6 {
			t.Errorf("%s: value ticks %q, want 2 to 6", name, ys)
		}
		var step float64
		for i, l := range ys {
			if !yLabel.MatchString(l) || strings.HasPrefix(l, "-") {
				t.Errorf("%s: value tick %q of %q is not a round, non-negative number", name, l, ys)
				continue
			}
			if i == 0 {
				continue
			}
			d := tickValue(l) - tickValue(ys[i-1])
			if i == 1 {
				step = d
			}
			if !(d > 0) || math.Abs(d-step) > step*1e-6 {
				t.Errorf("%s: value ticks %q are not evenly spaced upwards", name, ys)
				break
			}
		}
		distinct := map[string]bool{}
		for _, l := range xs {
			distinct[l] = true
		}
		if len(xs) < 2 || xs[len(xs)-1] != "now" || len(distinct) != len(xs) {
			t.Errorf("%s: time ticks %q, want several distinct, ending with now", name, xs)
		}
		for _, l := range xs {
			if !xLabel.MatchString(l) {
				t.Errorf("%s: time tick %q of %q is not \"… ago\" or \"now\"", name, l, xs)
			}
		}
	}
	if charts < 5 {
		t.Errorf("found %d charts with axes, want the queue, refusal, window and signal charts", charts)
	}
}

// tickValue is a value tick's number, its prefix applied.
func tickValue(label string) float64 {
	num, unit, _ := strings.Cut(strings.TrimSpace(label), " ")
	mult := map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50}[unit]
	if unit == "" {
		mult = 1
		for p, m := range map[string]float64{"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12} {
			if n, ok := strings.CutSuffix(num, p); ok {
				num, mult = n, m
			}
		}
	}
	v, _ := strconv.ParseFloat(num, 64)
	return v * mult
}

// checkRefusalColors reads the refusal chart's legend: every reason
// gatekeeper counts, and one it does not know, each in a colour no other
// reason has (rate_limited and no_memory once shared one).
func checkRefusalColors(t *testing.T, dom string) {
	t.Helper()
	legend := regexp.MustCompile(`<p class="legend" id="refusal-legend">(.*?)</p>`).FindStringSubmatch(dom)
	if legend == nil {
		t.Fatalf("the page has no refusal legend")
	}
	items := regexp.MustCompile(`<span[^>]*><i style="background: ([^;"]+);?"></i>([^<]+)</span>`).FindAllStringSubmatch(legend[1], -1)
	colors := map[string]string{} // colour → reason
	seen := map[string]bool{}
	for _, m := range items {
		color, reason := m[1], m[2]
		seen[reason] = true
		if other, ok := colors[color]; ok {
			t.Errorf("refusal reasons %s and %s share the colour %s", other, reason, color)
		}
		colors[color] = reason
	}
	for _, reason := range allReasons() {
		if !seen[string(reason)] {
			t.Errorf("the refusal legend lacks %s", reason)
		}
	}
}

// fakeAllocator is a memory_blocks endpoint on GPU 0 whose fragmentation
// ratio (total free ÷ largest free block) is ratio/100; zero means 1.0.
type fakeAllocator struct{ ratio atomic.Int64 }

func (f *fakeAllocator) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	r := f.ratio.Load()
	if r == 0 {
		r = 100
	}
	const gib = 1 << 30
	free := int64(16 * gib)
	fmt.Fprintf(w, `{"memory_blocks":[{"gpu_id":"0","total_bytes":%d,"used_bytes":%d,"free_bytes":%d,`+
		`"largest_free_block_bytes":%d,"reserved_bytes":%d,"allocated_bytes":%d}]}`,
		80*gib, 64*gib, free, free*100/r, 60*gib, 51*gib)
}
