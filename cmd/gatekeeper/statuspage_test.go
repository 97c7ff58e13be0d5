package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/pressure"
)

// TestStatusPageInChromium opens the page in headless Chromium against a
// running app whose pod the test moves from normal to degraded, and checks
// that the page renders the change without a console message of its own
// (pageConsole), then keeps a screenshot. GATEKEEPER_UPDATE_SCREENSHOT=1
// copies it to testdata/statuspage.png.
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
      - {kind: memory_blocks, url: %[1]s/memory_blocks}
fast_breaker: {qps: 1, burst: 1}
health_check: {interval: 1h, timeout: 1s}
pressure: {interval: 100ms, stale_after: 1m, hold: 1m, rules: {fragmentation: {degrade: 1.2, shed: 1.5}}}  # no for: one round moves a level
server: {drain_delay: 0s}
`, ps))

	// The page polls /admin/state once a second. Its first poll sees the pod
	// normal; before the second is answered the allocator turns fragmented
	// and the slow breaker hears it, as after a monitor poll (the hold of 1m
	// keeps the level there whatever the monitor reads later). The third
	// poll's moment also brings refusals for the refusal chart.
	var polls atomic.Int32
	ah := a.adminHandler()
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/admin/state" {
			switch polls.Add(1) {
			case 2:
				src.ratio.Store(130) // 1.30: degraded, below shed
				a.slow.observe(pressure.State{Upstreams: []pressure.UpstreamState{{Name: "pod",
					Signals: map[pressure.Signal]pressure.Value{pressure.Fragmentation: {Value: 1.3}}}}})
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
	for _, want := range []string{
		`data-upstream="pod" data-level="degraded"`,     // the card
		`data-level="degraded">degraded</span>`,         // its badge
		"pod: normal → degraded by fragmentation 1.300", // the level change log
		"normal → degraded by fragmentation 1.300</p>",  // the card's last change
		`data-signal="fragmentation"`,
		`<ul id="errors" hidden=""></ul>`, // errors the page caught: none
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("page lacks %q", want)
		}
	}
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
