package queue

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports fences the package: standard library only, and neither HTTP
// nor logging (ARCHITECTURE.md: queue reports through return values).
func TestImports(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	banned := []string{"net/http", "log", "log/slog"}
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
			if strings.Contains(first, ".") || strings.HasPrefix(path, "net/") {
				t.Errorf("%s imports %s: queue uses the standard library only, no network", f, path)
			}
			for _, b := range banned {
				if path == b {
					t.Errorf("%s imports %s", f, path)
				}
			}
		}
	}
}
