package config

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestImports fences the package: config imports no other gatekeeper
// package (cmd maps it onto theirs).
func TestImports(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if strings.Contains(imp.Path.Value, "github.com/gatekeeper-dev/gatekeeper") {
				t.Errorf("%s imports %s; config must import no gatekeeper package", name, imp.Path.Value)
			}
		}
	}
}
