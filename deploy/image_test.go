package deploy

import (
	"bufio"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestImageContext: the root .dockerignore sends the image's build exactly
// what `go build ./cmd/gatekeeper` reads in either variant (default and
// nvml): go.mod, go.sum, the non-test Go files of every package it is built
// from, what they embed, the PGO profile and what the Dockerfile COPYs. One
// file missing breaks the image's build; one more rebuilds the binary when
// it changes (a doc, a test). deploy/vllm/Dockerfile's own ignore file sends
// only the allocator exporter.
func TestImageContext(t *testing.T) {
	t.Parallel()
	goBin := lookTool(t, "go", "Go")
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	need := map[string]bool{"go.mod": true, "go.sum": true}
	if _, err := os.Stat(filepath.Join(root, "cmd/gatekeeper/default.pgo")); err == nil {
		need["cmd/gatekeeper/default.pgo"] = true // go build's -pgo=auto reads it
	}
	for _, src := range dockerfileCopies(t, filepath.Join(root, "Dockerfile")) {
		need[src] = true
	}
	for _, tags := range []string{"", "nvml"} {
		out, err := exec.CommandContext(t.Context(), goBin, "list", "-deps", "-tags", tags, "-f",
			`{{if not .Standard}}{{range .GoFiles}}{{$.Dir}}/{{.}} {{end}}{{range .CgoFiles}}{{$.Dir}}/{{.}} {{end}}`+
				`{{range .IgnoredGoFiles}}{{$.Dir}}/{{.}} {{end}}{{range .EmbedFiles}}{{$.Dir}}/{{.}} {{end}}{{end}}`,
			"github.com/gatekeeper-dev/gatekeeper/cmd/gatekeeper").Output()
		if err != nil {
			t.Fatalf("go list -deps -tags %q ./cmd/gatekeeper: %v", tags, err)
		}
		for _, f := range strings.Fields(string(out)) {
			rel, err := filepath.Rel(root, f)
			if err != nil || strings.HasPrefix(rel, "..") || strings.HasSuffix(rel, "_test.go") {
				continue // another module (go.mod's requirements), or a test excluded by its tags
			}
			need[filepath.ToSlash(rel)] = true
		}
	}
	sent := contextFiles(t, root, filepath.Join(root, ".dockerignore"))
	for _, f := range slices.Sorted(maps.Keys(need)) {
		if !slices.Contains(sent, f) {
			t.Errorf(".dockerignore leaves out %s, which the image's build reads", f)
		}
	}
	for _, f := range sent {
		if !need[f] {
			t.Errorf(".dockerignore sends %s, which the image's build does not read", f)
		}
	}

	vllm := contextFiles(t, root, filepath.Join(root, "deploy/vllm/Dockerfile.dockerignore"))
	if !slices.Contains(vllm, "exporters/pytorch/pyproject.toml") {
		t.Errorf("deploy/vllm/Dockerfile.dockerignore leaves out exporters/pytorch/pyproject.toml")
	}
	for _, f := range vllm {
		if !strings.HasPrefix(f, "exporters/pytorch/") || strings.Contains(f, "__pycache__") {
			t.Errorf("deploy/vllm/Dockerfile.dockerignore sends %s, outside the exporter's package", f)
		}
	}
}

// TestDockerfile: the default image is the static build on distroless
// static; the nvml variant the cgo build with the nvml tag on a glibc base;
// every base image is pinned by digest (scripts/pin-images.sh writes them);
// every go build uses BuildKit's cache mounts for Go's module and build
// caches.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	// Instructions with their continuation lines joined.
	instructions := strings.Split(regexp.MustCompile(`\\\n\s*`).ReplaceAllString(text, ""), "\n")
	stages := map[string]bool{} // the names of the stages so far
	pinned := regexp.MustCompile(`^[^@\s]+:[^@\s/]+@sha256:[0-9a-f]{64}$`)
	var builds []string
	for _, in := range instructions {
		f := strings.Fields(in)
		switch {
		case len(f) >= 2 && f[0] == "FROM":
			// An image, not a stage (FROM build, FROM run-${VARIANT}), is pinned.
			if ref := f[1]; !stages[ref] && !strings.Contains(ref, "${") {
				if !pinned.MatchString(ref) {
					t.Errorf("FROM %s: not pinned by digest (image:tag@sha256:…; scripts/pin-images.sh)", ref)
				}
			}
			if len(f) == 4 && strings.EqualFold(f[2], "AS") {
				stages[f[3]] = true
			}
		case len(f) >= 1 && f[0] == "RUN" && strings.Contains(in, "go build"):
			builds = append(builds, in)
			for _, cache := range []string{"--mount=type=cache,target=/go/pkg/mod", "--mount=type=cache,target=/root/.cache/go-build"} {
				if !strings.Contains(in, cache) {
					t.Errorf("%s\nhas no %s", in, cache)
				}
			}
		}
	}
	want := []struct {
		name string
		ok   bool
	}{
		{"the default variant is static", strings.Contains(text, "\nARG VARIANT=static\n")},
		{"a static build without cgo", slices.ContainsFunc(builds, func(b string) bool {
			return strings.Contains(b, "CGO_ENABLED=0 go build") && !strings.Contains(b, "-tags")
		})},
		{"an nvml build with cgo", slices.ContainsFunc(builds, func(b string) bool {
			return strings.Contains(b, "CGO_ENABLED=1") && strings.Contains(b, "go build -tags nvml")
		})},
		{"static runs on distroless static", strings.Contains(text, "FROM gcr.io/distroless/static-debian12:nonroot@") &&
			strings.Contains(text, " AS run-static\n")},
		{"nvml runs on distroless base (glibc)", strings.Contains(text, "FROM gcr.io/distroless/base-debian12:nonroot@") &&
			strings.Contains(text, " AS run-nvml\n")},
	}
	for _, w := range want {
		if !w.ok {
			t.Errorf("Dockerfile: want %s", w.name)
		}
	}
}

// dockerfileCopies returns the sources of the Dockerfile's COPY lines that
// read the build context (no --from).
func dockerfileCopies(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var srcs []string
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "COPY" || strings.HasPrefix(f[1], "--from=") {
			continue
		}
		srcs = append(srcs, f[1:len(f)-1]...)
	}
	return srcs
}

// contextFiles returns the files under root (slash-separated, relative)
// that a build with the ignore file sends, as Docker reads it: the last
// pattern that matches a path or one of its parent folders decides, "!"
// lets a path back in, "*" and "?" stay within a path element and "**"
// spans any number of them.
func contextFiles(t *testing.T, root, ignoreFile string) []string {
	t.Helper()
	f, err := os.Open(ignoreFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type rule struct {
		re     *regexp.Regexp
		letsIn bool
	}
	var rules []rule
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.TrimSpace(sc.Text())
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		p, letsIn := strings.CutPrefix(p, "!")
		rules = append(rules, rule{re: ignorePattern(t, strings.TrimPrefix(path.Clean(p), "/")), letsIn: letsIn})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	ignored := func(rel string) bool {
		out := false
		for _, r := range rules {
			for p := rel; p != "." && p != "/"; p = path.Dir(p) {
				if r.re.MatchString(p) {
					out = !r.letsIn
					break
				}
			}
		}
		return out
	}
	var sent []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == ".git" {
				return filepath.SkipDir // always ignored; its size would only slow the walk
			}
			return nil
		}
		if !ignored(rel) {
			sent = append(sent, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sent
}

// ignorePattern is a .dockerignore pattern as a regular expression over a
// whole slash-separated path.
func ignorePattern(t *testing.T, p string) *regexp.Regexp {
	t.Helper()
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case strings.HasPrefix(p[i:], "**/"):
			b.WriteString("(.*/)?")
			i += 2
		case strings.HasPrefix(p[i:], "**"):
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '[' || c == '\\':
			t.Fatalf("ignore pattern %q: character classes and escapes are not read by this test", p)
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}
