package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReloadLogsChanges: every applied reload logs the keys it changed, old
// → new, so a policy applied half-written shows what it took away and put
// back; secrets are masked. The file is written as a script writes it in
// two parts (issue 35: fast_breaker 250/500 → 80/40 → 250/500), each part
// reloaded as the watcher would once the file has been quiet.
func TestReloadLogsChanges(t *testing.T) {
	t.Parallel()
	const head = "upstreams: [{name: a, url: 'http://127.0.0.1:1'}]\nhealth_check: {interval: 1h}\n" +
		"hooks: {degraded: [{url: /reset, headers: {Authorization: 'Bearer s3cret'}}]}\n"
	const tail = "fast_breaker: {qps: 250, burst: 500}\n"
	path := filepath.Join(t.TempDir(), "policy.yaml")
	var logs bytes.Buffer
	a, err := newApp(mustParse(t, head+tail), appOptions{path: path, log: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		file string
		want []string // the reload's lines: "msg key old new"
	}{
		{strings.Replace(head, "s3cret", "n3w", 1), []string{ // the first part; the token rotated too
			"policy reloaded   ",
			"policy key changed fast_breaker.qps 250 80",
			"policy key changed fast_breaker.burst 500 40",
			"policy key changed hooks.degraded[0].headers.Authorization REDACTED REDACTED",
		}},
		{strings.Replace(head, "s3cret", "n3w", 1) + tail, []string{ // the second part
			"policy reloaded   ",
			"policy key changed fast_breaker.qps 80 250",
			"policy key changed fast_breaker.burst 40 500",
		}},
		{strings.Replace(head, "s3cret", "n3w", 1) + tail, []string{"policy reloaded   "}}, // SIGHUP, nothing changed
	}
	for i, st := range steps {
		if err := os.WriteFile(path, []byte(st.file), 0o600); err != nil {
			t.Fatal(err)
		}
		logs.Reset()
		a.policy.Reload("file_change")
		var got []string
		for line := range strings.Lines(logs.String()) {
			var l struct {
				Msg, Key, Old, New string
				Reload             int
			}
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if l.Reload != i+1 {
				t.Errorf("reload %d: line %q has reload %d", i+1, line, l.Reload)
			}
			got = append(got, strings.Join([]string{l.Msg, l.Key, l.Old, l.New}, " "))
		}
		if !slices.Equal(got, st.want) {
			t.Errorf("reload %d logs\n%q\nwant\n%q", i+1, got, st.want)
		}
		if s := logs.String(); strings.Contains(s, "s3cret") || strings.Contains(s, "n3w") {
			t.Errorf("reload %d logs a secret:\n%s", i+1, s)
		}
	}
}
