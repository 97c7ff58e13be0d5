package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCmdOnlyWires holds cmd/gatekeeper to wiring (issue 36): decisions live
// in packages, so the command stays small. Run it with -v to print the
// figures.
func TestCmdOnlyWires(t *testing.T) {
	t.Parallel()
	const (
		maxLines  = 1500 // non-test lines of the package
		maxFields = 12   // fields of the app struct
		maxFunc   = 60   // lines of any one function
	)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	lines, longest, longestName, fields := 0, 0, "", -1
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		lines += strings.Count(string(src), "\n")
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				l := fset.Position(n.End()).Line - fset.Position(n.Pos()).Line + 1
				if l > longest {
					longest, longestName = l, name+":"+n.Name.Name
				}
				if l > maxFunc {
					t.Errorf("%s: func %s is %d lines; at most %d", name, n.Name.Name, l, maxFunc)
				}
			case *ast.TypeSpec:
				if st, ok := n.Type.(*ast.StructType); ok && n.Name.Name == "app" {
					fields = 0
					for _, f := range st.Fields.List {
						fields += max(1, len(f.Names))
					}
				}
			}
			return true
		})
	}
	t.Logf("cmd/gatekeeper: %d non-test lines (at most %d); app has %d fields (at most %d); longest func %s, %d lines (at most %d)",
		lines, maxLines, fields, maxFields, longestName, longest, maxFunc)
	if lines >= maxLines {
		t.Errorf("cmd/gatekeeper has %d non-test lines; below %d: move decisions into packages", lines, maxLines)
	}
	if fields > maxFields {
		t.Errorf("app has %d fields; at most %d", fields, maxFields)
	}
}
