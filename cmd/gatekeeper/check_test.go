package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/policy"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// writePolicy writes text to a file named name in a temporary folder and
// returns its path.
func writePolicy(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheck(t *testing.T) {
	t.Parallel()
	const withSource = "upstreams:\n  - url: http://a:8000\n    sources: [{kind: vllm, url: http://a:8000/metrics}]\n"
	tests := []struct {
		name     string
		policy   string // written to p.yaml; "" checks the embedded default
		extra    []string
		wantErr  error
		exit     int
		stdout   string
		stderr   []string // the lines of stderr, each after "FILE: "
		noPolicy bool     // check the embedded default
	}{
		{name: "embedded default", noPolicy: true, stdout: "embedded default policy: ok\n"},
		{name: "clean", policy: withSource, stdout: "p.yaml: ok\n"},
		{name: "no pressure source", policy: "upstreams:\n  - url: http://a:8000\n", wantErr: errWarned, exit: 3,
			stdout: "p.yaml: valid, 1 warning\n",
			stderr: []string{"line 2: upstreams[0].sources: warning: no pressure source reads this pod: the slow breaker has no signal for it (list its vLLM /metrics here)"}},
		{name: "vocab_size without memory_blocks", policy: withSource + "    vocab_size: 128256\n", wantErr: errWarned, exit: 3,
			stdout: "p.yaml: valid, 1 warning\n",
			stderr: []string{"line 4: upstreams[0].vocab_size: warning: memory admission needs a memory_blocks source for this pod (its own, or one in pressure.sources and upstreams[0].gpus): without its free_bytes the memory budget is never set and admission stays off"}},
		{name: "replicas without cluster", policy: withSource, extra: []string{"-replicas", "3"}, wantErr: errWarned, exit: 3,
			stdout: "p.yaml: valid, 1 warning\n",
			stderr: []string{"cluster: warning: 3 replicas without a cluster section: each enforces every limit and window alone, so the pods can get 3× fast_breaker.qps and 3× each max_inflight"}},
		{name: "cluster replicas differ", policy: withSource + "cluster:\n  redis: {url: redis://r:6379/0}\n  replicas: 2\n",
			extra: []string{"-replicas", "4"}, wantErr: errWarned, exit: 3, stdout: "p.yaml: valid, 1 warning\n",
			stderr: []string{"line 6: cluster.replicas: warning: is 2, but 4 replicas run: until Redis first answers each takes 1/2 of every limit and window, 4/2 of them together"}},
		{name: "cluster replicas match", policy: withSource + "cluster:\n  redis: {url: redis://r:6379/0}\n  replicas: 2\n",
			extra: []string{"-replicas", "2"}, stdout: "p.yaml: ok\n"},
		{name: "max_wait beyond the default deadline", policy: withSource + "queue:\n  max_wait: 60s\n", wantErr: errWarned, exit: 3,
			stdout: "p.yaml: valid, 1 warning\n",
			stderr: []string{"line 5: queue.max_wait: warning: 1m is longer than queue.ttft_deadline, which this file does not set: its default 1500ms applies to every request, which gets 503 deadline once it cannot start within 1500ms and so never waits 1m; set queue.ttft_deadline (0s: no deadline, max_wait alone)"}},
		// Without -replicas the policy's own count stands: no warning about
		// a replica count nobody gave (issue 35, item 8).
		{name: "cluster replicas, no -replicas", policy: withSource + "cluster:\n  redis: {url: redis://r:6379/0}\n  replicas: 2\n",
			stdout: "p.yaml: ok\n"},
		{name: "cluster replicas, -replicas 1", policy: withSource + "cluster:\n  redis: {url: redis://r:6379/0}\n  replicas: 2\n",
			extra: []string{"-replicas", "1"}, wantErr: errWarned, exit: 3, stdout: "p.yaml: valid, 1 warning\n",
			stderr: []string{"line 6: cluster.replicas: warning: is 2, but 1 replica runs: until Redis first answers each takes 1/2 of every limit and window, 1/2 of them together"}},
		{name: "errors", policy: "upstreams:\n  - name: a\n    url: ftp://x\nlisen: 1\n", wantErr: errReported, exit: 1,
			stderr: []string{
				`line 3: upstreams[0].url: error: scheme must be http or https, got "ftp://x"`,
				`line 4: error: unknown key "lisen" at top level`,
				"invalid, 2 errors",
			}},
		{name: "syntax error", policy: "upstreams: [\n", wantErr: errReported, exit: 1,
			stderr: []string{"line 1: error: invalid YAML: did not find expected node content", "invalid, 1 error"}},
		// yaml.v3 says line 2 (issue 35, item 13).
		{name: "tab", policy: "upstreams:\n  - url: http://a:8000\n\tname: a\n", wantErr: errReported, exit: 1,
			stderr: []string{"line 3: error: invalid YAML: found a tab character that violates indentation", "invalid, 1 error"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"-check"}, tt.extra...)
			prefix := "embedded default policy: "
			if !tt.noPolicy {
				path := writePolicy(t, "p.yaml", tt.policy)
				args = append(args, "-config", path)
				prefix = path + ": "
				tt.stdout = strings.Replace(tt.stdout, "p.yaml", path, 1)
			}
			var out, errb bytes.Buffer
			err := command(t.Context(), args, &out, &errb)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("command(%v) = %v, want %v; stderr %s", args, err, tt.wantErr, errb.String())
			}
			if code := exitCode(err); code != tt.exit {
				t.Errorf("exitCode(%v) = %d, want %d", err, code, tt.exit)
			}
			if out.String() != tt.stdout {
				t.Errorf("stdout = %q, want %q", out.String(), tt.stdout)
			}
			var want string
			for _, l := range tt.stderr {
				want += prefix + l + "\n"
			}
			if got := errb.String(); got != want {
				t.Errorf("stderr =\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestCommandFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string // the error's text
	}{
		{[]string{"-replicas", "2"}, "-replicas goes with -check"},
		{[]string{"-check", "-replicas", "0"}, "-replicas must be at least 1, got 0"},
		{[]string{"-check", "-print-config"}, "-check and -print-config: choose one"},
		{[]string{"-demo", "-print-config"}, "-demo builds its own policy; it takes no -print-config"},
		{[]string{"-demo", "-check"}, "gatekeeper: -demo builds its own policy; it takes no -config or -check"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		err := command(t.Context(), tt.args, &out, &errb)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("command(%v) = %v, want %q", tt.args, err, tt.want)
		}
		if code := exitCode(err); code != 1 {
			t.Errorf("exitCode(%v) = %d, want 1", err, code)
		}
	}
	var out, errb bytes.Buffer
	if err := command(t.Context(), []string{"-version"}, &out, &errb); err != nil || out.String() != "gatekeeper dev\n" {
		t.Errorf("command(-version) = %v, stdout %q; want gatekeeper dev", err, out.String())
	}
}

// TestCommandUsage: -h prints the usage, with every subcommand, on stdout
// and exits 0; a flag gatekeeper does not know prints it on stderr and
// exits 1 (issue 35, item 13: -h exited 1 and did not list probe).
func TestCommandUsage(t *testing.T) {
	t.Parallel()
	// The usage lists every subcommand command dispatches.
	var listed []string
	for _, s := range subcommands {
		listed = append(listed, "\n  "+s.name+" ", s.summary)
	}
	tests := []struct {
		args       []string
		exit       int
		stdout     []string // what stdout holds; nil: nothing
		stderr     []string // what stderr holds; nil: nothing
		stderrLead string   // stderr's first line, if any
	}{
		{args: []string{"-h"}, stdout: append([]string{"usage: gatekeeper", "-print-config", "-demo-pod"}, listed...)},
		{args: []string{"-help"}, stdout: []string{"usage: gatekeeper", "-print-config"}},
		{args: []string{"--help"}, stdout: []string{"usage: gatekeeper", "-print-config"}},
		{args: []string{"-check", "-h"}, stdout: []string{"usage: gatekeeper"}},
		{args: []string{"probe", "-h"}, stdout: []string{"usage: gatekeeper probe", "-kind", "-timeout"}},
		{args: []string{"probe", "http://127.0.0.1:1/metrics", "-help"}, stdout: []string{"usage: gatekeeper probe"}},
		{args: []string{"-bogus"}, exit: 1, stderrLead: "flag provided but not defined: -bogus",
			stderr: append([]string{"usage: gatekeeper", "-print-config"}, listed...)},
		{args: []string{"-replicas", "two"}, exit: 1, stderrLead: `invalid value "two" for flag -replicas: parse error`,
			stderr: []string{"usage: gatekeeper"}},
		{args: []string{"probe", "-bogus"}, exit: 1, stderrLead: "flag provided but not defined: -bogus",
			stderr: []string{"usage: gatekeeper probe"}},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		err := command(t.Context(), tt.args, &out, &errb)
		if code := exitCode(err); code != tt.exit {
			t.Errorf("command(%q) = %v: exit %d, want %d", tt.args, err, code, tt.exit)
		}
		for _, s := range []struct {
			name, got string
			want      []string
		}{{"stdout", out.String(), tt.stdout}, {"stderr", errb.String(), tt.stderr}} {
			if s.want == nil && s.got != "" {
				t.Errorf("command(%q) wrote %q on %s, want nothing", tt.args, s.got, s.name)
			}
			for _, w := range s.want {
				if !strings.Contains(s.got, w) {
					t.Errorf("command(%q)'s %s = %q, want it to hold %q", tt.args, s.name, s.got, w)
				}
			}
		}
		if lead, _, _ := strings.Cut(errb.String(), "\n"); lead != tt.stderrLead {
			t.Errorf("command(%q)'s stderr begins %q, want %q", tt.args, lead, tt.stderrLead)
		}
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want int
	}{{nil, 0}, {errReported, 1}, {errWarned, 3}, {flag.ErrHelp, 0}, {errors.New("x"), 1}} {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

// TestPrintConfig: -print-config writes the effective policy, which -check
// accepts (a build without the nvml tag refuses its nvml sources, and only
// those: unbuiltSources) and which parses back to the policy printed.
func TestPrintConfig(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("../../internal/config/testdata/*.good.yaml")
	if len(files) == 0 {
		t.Fatal("no internal/config/testdata/*.good.yaml: the policies this test prints are gone")
	}
	files = append(files, "../../config.yaml", "") // "": the embedded default
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			args := []string{"-print-config"}
			want := config.Default()
			if f != "" {
				args = append(args, "-config", f)
				var err error
				if want, err = config.LoadFile(f); err != nil {
					t.Fatal(err)
				}
			}
			var out, errb bytes.Buffer
			if err := command(t.Context(), args, &out, &errb); err != nil {
				t.Fatalf("command(%v) = %v; stderr %s", args, err, errb.String())
			}
			if !strings.HasPrefix(out.String(), "# gatekeeper -print-config: the effective policy of ") {
				t.Errorf("output starts %.80q, want the header comment", out.String())
			}
			printed := writePolicy(t, "printed.yaml", out.String())
			var cout, cerr bytes.Buffer
			if err := command(t.Context(), []string{"-check", "-config", printed}, &cout, &cerr); err != nil && !errors.Is(err, errWarned) &&
				!onlyUnbuiltSources(cerr.String()) {
				t.Errorf("-check of the printed policy = %v:\n%s", err, cerr.String())
			}
			back, err := config.LoadFile(printed)
			if err != nil {
				t.Fatal(err)
			}
			if d := config.Diff(want, back); len(d) > 0 {
				t.Errorf("the printed policy differs from %s at %v", f, d)
			}
		})
	}
}

// onlyUnbuiltSources reports whether -check's stderr holds errors, all of
// them kind nvml in a build without the nvml tag.
func onlyUnbuiltSources(stderr string) bool {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if pressure.NVMLCompiled || len(lines) < 2 {
		return false
	}
	for _, l := range lines[:len(lines)-1] { // the last line counts the errors
		if !strings.HasSuffix(l, ": error: "+policy.NVMLNotCompiled) {
			return false
		}
	}
	return true
}

func TestPrintConfigInvalid(t *testing.T) {
	t.Parallel()
	path := writePolicy(t, "bad.yaml", "upstreams: []\n")
	var out, errb bytes.Buffer
	err := command(t.Context(), []string{"-print-config", "-config", path}, &out, &errb)
	if !errors.Is(err, errReported) || out.Len() > 0 {
		t.Fatalf("command(-print-config bad) = %v, stdout %q; want errReported and nothing printed", err, out.String())
	}
	if want := path + ": line 1: upstreams: error: at least one upstream is required\n"; !strings.HasPrefix(errb.String(), want) {
		t.Errorf("stderr = %q, want it to start %q", errb.String(), want)
	}
}
