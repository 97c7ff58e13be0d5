package breaker

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports fences the package: standard library plus its two chosen
// dependencies, and nothing of HTTP, logging or metrics (STYLE §1, §8).
func TestImports(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"golang.org/x/time/rate": true, "github.com/sony/gobreaker/v2": true}
	banned := []string{"net/http", "log", "log/slog", "github.com/prometheus"}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, b := range banned {
				if path == b || strings.HasPrefix(path, b+"/") {
					t.Errorf("%s imports %s, which breaker must not use", name, path)
				}
			}
			if strings.Contains(strings.SplitN(path, "/", 2)[0], ".") && !allowed[path] {
				t.Errorf("%s imports %s, not one of breaker's dependencies", name, path)
			}
		}
	}
}
