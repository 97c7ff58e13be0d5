package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadme holds README.md to what a newcomer's page promises: at most
// 250 lines; exactly two set-up commands in its first shell block, the
// demo on the embedded default (a bare go run: the default build needs no
// cgo) and the test suite, the second being what .ci/run runs; and every
// docs/ page it names exists.
func TestReadme(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if n := strings.Count(text, "\n"); n > 250 {
		t.Errorf("README.md has %d lines, want at most 250", n)
	}
	block := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(text)
	if block == nil {
		t.Fatal("README.md has no sh block")
	}
	var cmds []string
	for _, l := range strings.Split(strings.TrimSpace(block[1]), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			cmds = append(cmds, l)
		}
	}
	if len(cmds) != 2 || !strings.Contains(cmds[0], "go run ./cmd/gatekeeper -demo") || cmds[1] != "./scripts/test.sh" {
		t.Fatalf("README.md's first sh block = %q, want the demo and ./scripts/test.sh", cmds)
	}
	if !strings.HasPrefix(cmds[0], "go run ") {
		t.Errorf("README.md's demo command = %q, want a bare go run: the default build needs no cgo setting", cmds[0])
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ci), "exec ./scripts/test.sh") {
		t.Error(".ci/run does not run ./scripts/test.sh, the README's test command")
	}
	for _, m := range regexp.MustCompile(`docs/[a-z.]+\.(md|json)`).FindAllString(text, -1) {
		if _, err := os.Stat(filepath.Join("../..", m)); err != nil {
			t.Errorf("README.md names %s: %v", m, err)
		}
	}
}
