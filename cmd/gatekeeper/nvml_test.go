package main

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/policy"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
	"github.com/gatekeeper-dev/gatekeeper/internal/syncbuf"
)

// nvmlPolicy lists nvml twice: as a node source (line 3) and as an
// upstream's own (line 8).
const nvmlPolicy = `pressure:
  sources:
    - {kind: nvml}
upstreams:
  - {name: a, url: "http://a:8000", gpus: ["0"], sources: [{kind: vllm, url: "http://a:8000/metrics"}]}
  - name: b
    url: http://b:8000
    sources: [{kind: nvml, name: node-b}]
    gpus: ["1"]
`

// TestNVMLPolicyWithoutTheTag: a build without the nvml tag (the default,
// the static image) refuses a policy listing kind nvml at -check, at start
// (before it listens) and on reload, naming the file, line and key;
// -print-config still shows it (it is a valid policy).
func TestNVMLPolicyWithoutTheTag(t *testing.T) {
	if pressure.NVMLCompiled {
		t.Skip("built with the nvml tag: kind nvml is read")
	}
	t.Parallel()
	path := writePolicy(t, "p.yaml", nvmlPolicy)
	var out, errb bytes.Buffer
	err := command(t.Context(), []string{"-check", "-config", path}, &out, &errb)
	if !errors.Is(err, errReported) || exitCode(err) != exitError {
		t.Fatalf("-check = %v (exit %d), want errors reported (exit 1); stderr %s", err, exitCode(err), errb.String())
	}
	want := path + ": line 3: pressure.sources[0].kind: error: " + policy.NVMLNotCompiled + "\n" +
		path + ": line 8: upstreams[1].sources[0].kind: error: " + policy.NVMLNotCompiled + "\n" +
		path + ": invalid, 2 errors\n"
	if errb.String() != want {
		t.Errorf("-check stderr =\n%s\nwant\n%s", errb.String(), want)
	}
	errb.Reset()
	err = run(t.Context(), path, &errb)
	if err == nil || !strings.Contains(err.Error(), "pressure.sources[0].kind: "+policy.NVMLNotCompiled) {
		t.Errorf("run() = %v, want the start refused with the nvml error", err)
	}
	out.Reset()
	if err := command(t.Context(), []string{"-print-config", "-config", path}, &out, &errb); err != nil ||
		!strings.Contains(out.String(), "kind: nvml") {
		t.Errorf("-print-config = %v, output %q; want the policy printed", err, out.String())
	}

	// A running gatekeeper keeps its policy when the file turns to one with nvml.
	running := writePolicy(t, "running.yaml", "upstreams: [{name: a, url: \"http://127.0.0.1:1\"}]\nhealth_check: {interval: 1h}\n")
	cfg, err := policy.LoadRunnable(running, pressure.NVMLCompiled)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	var stages []string // written by reload, on this goroutine
	a, err := newApp(cfg, appOptions{path: running, transport: okTransport{},
		log: slog.New(slog.NewJSONHandler(&logs, nil)), stage: func(s string) { stages = append(stages, s) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.close)
	before := a.cfg()
	if err := os.WriteFile(running, []byte(nvmlPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	a.policy.Reload("sighup")
	if a.cfg() != before || !slices.Contains(stages, "reload_refused") || !strings.Contains(logs.String(), "pressure.sources[0].kind: kind nvml is not compiled") {
		t.Errorf("reload to an nvml policy: stages %v, log %s; want it refused with the nvml error, the running policy kept", stages, logs.String())
	}
}
