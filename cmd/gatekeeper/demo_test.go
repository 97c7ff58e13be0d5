package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/syncbuf"
	"github.com/gatekeeper-dev/gatekeeper/sim/demo"
	"github.com/gatekeeper-dev/gatekeeper/sim/load"
)

func TestRunDemo(t *testing.T) {
	tests := []struct {
		name       string
		d          demo.Flags
		wantErr    string
		wantStdout string
		wantLog    string
	}{
		{name: "bad traffic address", d: demo.Flags{On: true, Listen: "127.0.0.1:-1", AdminListen: "127.0.0.1:0", Pod: "default"},
			wantErr: "-demo-listen"},
		{name: "bad admin address", d: demo.Flags{On: true, Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:-1", Pod: "default"},
			wantErr: "-demo-admin-listen"},
		{name: "unknown pod", d: demo.Flags{On: true, Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", Pod: "huge"},
			wantErr: `no pod "huge" (have default, tight)`},
		// ctx is already done: the demo starts, prints its curls, drains (1 s) and stops.
		{name: "starts and stops", d: demo.Flags{On: true, Load: true, Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", Pod: "default"},
			wantStdout: "/v1/chat/completions", wantLog: `"pod":"default","gpu":"A10G","model":"meta-llama/Meta-Llama-3-8B","gpu_memory_utilization":0.9`},
		{name: "tight pod starts and stops", d: demo.Flags{On: true, Load: true, Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", Pod: "tight"},
			wantStdout: "/v1/chat/completions", wantLog: `"pod":"tight","gpu":"A10G","model":"meta-llama/Meta-Llama-3-8B","gpu_memory_utilization":0.968`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			var out, errb syncbuf.Buffer
			err := runDemo(ctx, tt.d, &out, &errb)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("runDemo(%+v) = %v, want an error naming %s", tt.d, err, tt.wantErr)
				}
				return
			}
			if err != nil || !strings.Contains(out.String(), tt.wantStdout) || !strings.Contains(errb.String(), `"msg":"gatekeeper stopped"`) ||
				!strings.Contains(errb.String(), tt.wantLog) {
				t.Errorf("runDemo(%+v) = %v, stdout %q, stderr %s; want nil, the curls and a clean stop", tt.d, err, out.String(), errb.String())
			}
		})
	}
}

// demoRun is a demo serving on loopback ephemeral ports for one test.
type demoRun struct {
	trafficURL, adminURL string
	firstReading         chan struct{} // closed once both pod sources have reported
	loadDone             chan load.Stats
	logs, banner         *syncbuf.Buffer
	cancel               context.CancelFunc
	stopped              chan struct{} // closed when serveDemo returns
	err                  error         // serveDemo's result, set before stopped closes
}

// startDemo runs serveDemo with the sim at speed 20 and no drain delay.
func startDemo(t *testing.T, ls *load.Settings) *demoRun {
	t.Helper()
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	d := &demoRun{firstReading: make(chan struct{}), loadDone: make(chan load.Stats, 1),
		logs: &syncbuf.Buffer{}, banner: &syncbuf.Buffer{}, stopped: make(chan struct{})}
	var once sync.Once
	o := demoOptions{traffic: listen(), admin: listen(), sim: listen(), speed: 20, load: ls,
		log: slog.New(slog.NewJSONHandler(d.logs, nil)), banner: d.banner,
		onPressure: func(st pressure.State) {
			if _, ok := demo.Reading(st); ok {
				once.Do(func() { close(d.firstReading) })
			}
		},
		onLoadDone: func(s load.Stats) { d.loadDone <- s },
	}
	d.trafficURL, d.adminURL = "http://"+o.traffic.Addr().String(), "http://"+o.admin.Addr().String()
	ctx, cancel := context.WithCancel(t.Context())
	d.cancel = cancel
	go func() {
		defer close(d.stopped)
		d.err = serveDemo(ctx, o)
	}()
	t.Cleanup(func() {
		cancel()
		<-d.stopped
	})
	return d
}

// stop cancels the demo's ctx and returns serveDemo's result.
func (d *demoRun) stop(t *testing.T) error {
	t.Helper()
	d.cancel()
	guard := time.NewTimer(30 * time.Second) // a hang guard, not a timed assertion
	defer guard.Stop()
	select {
	case <-d.stopped:
		return d.err
	case <-guard.C:
		t.Fatalf("serveDemo did not return after cancel; logs:\n%s", d.logs.String())
		return nil
	}
}

// wait receives from ch, failing the test if the demo stops first or a
// generous safety bound passes (a hang guard, not a timed assertion).
func wait[T any](t *testing.T, d *demoRun, ch <-chan T, what string) T {
	t.Helper()
	guard := time.NewTimer(30 * time.Second)
	defer guard.Stop()
	select {
	case v := <-ch:
		return v
	case <-d.stopped:
		t.Fatalf("demo stopped (%v) before %s; logs:\n%s", d.err, what, d.logs.String())
	case <-guard.C:
		t.Fatalf("no %s; logs:\n%s", what, d.logs.String())
	}
	var zero T
	return zero
}

func TestDemoServesThroughGatekeeper(t *testing.T) {
	d := startDemo(t, nil)
	wait(t, d, d.firstReading, "pressure reading from both pod sources")

	tests := []struct {
		name, body, want string
	}{
		{name: "chat", want: `"object":"chat.completion"`,
			body: `{"model":"` + demo.Model + `","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`},
		{name: "streaming chat", want: "data: [DONE]",
			body: `{"model":"` + demo.Model + `","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := http.Post(d.trafficURL+"/v1/chat/completions", "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK || !strings.Contains(string(b), tt.want) {
				t.Errorf("POST %s = %d %s, want 200 containing %q", tt.body, res.StatusCode, b, tt.want)
			}
		})
	}

	var st struct {
		Upstreams []struct {
			Name    string                     `json:"name"`
			Level   string                     `json:"level"`
			Signals map[string]json.RawMessage `json:"signals"`
		} `json:"upstreams"`
		Sources []struct {
			Kind string `json:"kind"`
		} `json:"sources"`
	}
	if err := json.Unmarshal([]byte(fetch(t, d.adminURL+"/admin/state")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Upstreams) != 1 || st.Upstreams[0].Name != demo.Upstream {
		t.Fatalf("/admin/state upstreams = %+v, want %s", st.Upstreams, demo.Upstream)
	}
	for _, sig := range []string{"kv_cache_usage", "fragmentation", "waiting"} {
		if _, ok := st.Upstreams[0].Signals[sig]; !ok {
			t.Errorf("/admin/state signals lack %s: %v", sig, st.Upstreams[0].Signals)
		}
	}
	if len(st.Sources) != 2 {
		t.Errorf("/admin/state sources = %+v, want the pod's vllm and memory_blocks", st.Sources)
	}
	if m := fetch(t, d.adminURL+"/metrics"); !strings.Contains(m, `gatekeeper_window_limit{upstream="vllm-sim"} 64`) {
		t.Errorf("/metrics lacks the demo upstream's window")
	}
	for _, want := range []string{d.trafficURL + "/v1/chat/completions", d.adminURL + "/admin/state", d.adminURL + "/metrics"} {
		if !strings.Contains(d.banner.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, d.banner.String())
		}
	}

	if err := d.stop(t); err != nil {
		t.Errorf("serveDemo() = %v, want nil after ctx ends", err)
	}
	for _, want := range []string{`"msg":"demo ready"`, `"msg":"demo: first pressure reading"`, `"msg":"gatekeeper stopped"`} {
		if !strings.Contains(d.logs.String(), want) {
			t.Errorf("logs lack %s", want)
		}
	}
}

func TestDemoLoad(t *testing.T) {
	const n = 12
	d := startDemo(t, &load.Settings{QPS: 40, MaxRequests: n, LongFraction: -1, ReportEvery: 100 * time.Millisecond, Seed: 3})
	s := wait(t, d, d.loadDone, "end of the bounded load")
	if s.Arrivals != n || s.Sent+s.Skipped != s.Arrivals || s.Finished() != s.Sent || s.InFlight != 0 {
		t.Errorf("load stats = %+v, want %d arrivals = sent + skipped, sent = finished, none pending", s, n)
	}
	// The fast breaker's burst of 5 lets the first requests through.
	if s.Statuses[http.StatusOK] == 0 || s.Errors != 0 || s.Canceled != 0 {
		t.Errorf("load stats = %+v, want some 200s and no errors", s)
	}
	if s.Statuses[http.StatusTooManyRequests] != s.Reasons["rate_limited"] {
		t.Errorf("429s %d, rate_limited reasons %d, want equal", s.Statuses[http.StatusTooManyRequests], s.Reasons["rate_limited"])
	}
	if !strings.Contains(d.logs.String(), `"msg":"load stopped"`) || !strings.Contains(d.logs.String(), `"msg":"load phase changed"`) {
		t.Errorf("logs lack the load's phase and final lines:\n%s", d.logs.String())
	}
	// The final line says what the pod went through: the time at each
	// level (peaks once a reading came) and the 503s with Retry-After.
	var stopped string
	for _, line := range strings.Split(d.logs.String(), "\n") {
		if strings.Contains(line, `"msg":"load stopped"`) {
			stopped = line
		}
	}
	// Times at a level are seconds, a number (issue 35, item 13).
	for _, want := range []string{`"retry_after_503":`, `"time_degraded_s":[0-9]`, `"time_critical_s":[0-9]`} {
		if !regexp.MustCompile(want).MatchString(stopped) {
			t.Errorf("the load's final line lacks %s: %s", want, stopped)
		}
	}
}
