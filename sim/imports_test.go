package sim

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports fences the core: standard library only, no network, no
// logging, no goroutine-owning dependency (ARCHITECTURE.md; sim/server and
// sim/replay add HTTP and the breaker/queue cores on top).
func TestImports(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			if strings.Contains(first, ".") || strings.HasPrefix(path, "net") || strings.HasPrefix(path, "log") {
				t.Errorf("%s imports %s: sim's core uses the standard library only", f, path)
			}
		}
	}
}
