package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLogDurations holds every log line to one rule for time: a duration is
// logged as seconds, a float, under a key ending in _s
// (slog.Float64("duration_s", d.Seconds())), as the metrics count seconds.
// slog writes a time.Duration as integer nanoseconds in JSON, which reads
// as a count (issue 35, item 13); text ("1.5s") is not a number to a log
// query.
//
// It type-checks the module's production code (the default build) and
// fails on every call into log/slog that is handed a time.Duration
// (slog.Duration, slog.Any, a key-value pair of Info or Log, …) or
// d.String(), and on every d.Seconds() handed to one under a constant key
// without the _s.
func TestLogDurations(t *testing.T) {
	t.Parallel()
	pkgs := listForTypes(t, "github.com/gatekeeper-dev/gatekeeper/...")
	fset := token.NewFileSet()
	imp, duration := exportImporter(t, fset, pkgs)
	checked := 0
	for _, p := range pkgs {
		if p.Standard || strings.Contains(p.ImportPath, " [") || !strings.HasPrefix(p.ImportPath, "github.com/gatekeeper-dev/gatekeeper") || p.Module == nil || !p.Module.Main {
			continue
		}
		var files []*ast.File
		for _, name := range append(p.GoFiles, p.CgoFiles...) {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{},
			Selections: map[*ast.SelectorExpr]*types.Selection{}}
		conf := types.Config{Importer: importerMap{imp, p.ImportMap}, FakeImportC: true}
		if _, err := conf.Check(p.ImportPath, fset, files, info); err != nil {
			t.Fatalf("type-checking %s: %v", p.ImportPath, err)
		}
		for _, f := range files {
			for _, bad := range durationLogs(f, info, duration) {
				t.Errorf("%s: %s", fset.Position(bad.pos), bad.why)
			}
		}
		checked++
	}
	if checked < 10 {
		t.Errorf("checked %d packages of the module, want them all", checked)
	}
}

// A logged duration that breaks the rule.
type durationLog struct {
	pos token.Pos
	why string
}

// durationLogs finds, in f, the calls into log/slog that log a duration
// other than as seconds under a key ending in _s.
func durationLogs(f *ast.File, info *types.Info, duration types.Type) []durationLog {
	var bad []durationLog
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		fn := callee(info, call)
		if fn == nil || fn.Pkg() == nil || fn.Pkg().Path() != "log/slog" {
			return true
		}
		for i, arg := range call.Args {
			if types.Identical(info.Types[arg].Type, duration) {
				bad = append(bad, durationLog{arg.Pos(), fmt.Sprintf("slog.%s is handed a time.Duration (integer nanoseconds in JSON): log d.Seconds() under a key ending in _s", fn.Name())})
				continue
			}
			if durationMethod(info, arg, duration, "String") {
				bad = append(bad, durationLog{arg.Pos(), fmt.Sprintf("slog.%s is handed a duration as text: log d.Seconds() under a key ending in _s", fn.Name())})
				continue
			}
			if i == 0 || !durationMethod(info, arg, duration, "Seconds") {
				continue
			}
			key := info.Types[call.Args[i-1]].Value
			if key != nil && key.Kind() == constant.String && !strings.HasSuffix(constant.StringVal(key), "_s") {
				bad = append(bad, durationLog{arg.Pos(), fmt.Sprintf("seconds logged under %s: the key of a duration ends in _s", key)})
			}
		}
		return true
	})
	return bad
}

// callee is the function or method call calls, if it names one.
func callee(info *types.Info, call *ast.CallExpr) *types.Func {
	var id *ast.Ident
	switch fun := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		id = fun
	case *ast.SelectorExpr:
		if sel, ok := info.Selections[fun]; ok {
			fn, _ := sel.Obj().(*types.Func)
			return fn
		}
		id = fun.Sel
	default:
		return nil
	}
	fn, _ := info.Uses[id].(*types.Func)
	return fn
}

// durationMethod reports whether e is d.name() for a time.Duration d.
func durationMethod(info *types.Info, e ast.Expr, duration types.Type, name string) bool {
	call, ok := ast.Unparen(e).(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
	return ok && sel.Sel.Name == name && types.Identical(info.Types[sel.X].Type, duration)
}

// TestDurationLogsFinds proves the check on a file of its own: what it
// must flag and what it must let through.
func TestDurationLogsFinds(t *testing.T) {
	t.Parallel()
	const src = `package p

import (
	"context"
	"log/slog"
	"time"
)

func f(l *slog.Logger, d time.Duration) {
	l.Info("a", slog.Duration("duration", d))                         // flagged
	l.Info("b", "duration", d)                                       // flagged
	l.Info("c", slog.Any("wait", d))                                 // flagged
	l.LogAttrs(context.Background(), slog.LevelInfo, "d", slog.Float64("duration", d.Seconds())) // flagged: the key
	l.Info("e", "age", d.Seconds())                                  // flagged: the key
	l.Info("g", slog.String("wait", d.Round(time.Second).String()))  // flagged: text
	l.Info("f", slog.Float64("duration_s", d.Seconds()), "age_s", d.Seconds(), slog.Int("n", 3))
	_ = slog.Group("g", slog.Float64("wait_s", d.Seconds()))
	l.Info(d.String()) // flagged: text
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	imp, duration := exportImporter(t, fset, listForTypes(t, "context", "log/slog", "time"))
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{},
		Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: imp}
	if _, err := conf.Check("p", fset, []*ast.File{f}, info); err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, b := range durationLogs(f, info, duration) {
		got = append(got, fset.Position(b.pos).Line)
	}
	if want := []int{10, 11, 12, 13, 14, 15, 18}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("durationLogs flags lines %v, want %v", got, want)
	}
}

// listedPackage is what go list says of one package.
type listedPackage struct {
	ImportPath, Dir, Export string
	Standard                bool
	GoFiles, CgoFiles       []string
	ImportMap               map[string]string
	Module                  *struct{ Main bool }
}

// listForTypes lists the packages of patterns and their dependencies with
// export data (compiled, or taken from the build cache).
func listForTypes(t *testing.T, patterns ...string) []listedPackage {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-export", "-deps", "-pgo=off",
		"-json=ImportPath,Dir,Export,Standard,GoFiles,CgoFiles,ImportMap,Module"}, patterns...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
}

// exportImporter imports the packages listed from their export data, and
// returns time.Duration's type as it imports it.
func exportImporter(t *testing.T, fset *token.FileSet, pkgs []listedPackage) (types.Importer, types.Type) {
	t.Helper()
	exports := map[string]string{}
	for _, p := range pkgs {
		exports[p.ImportPath] = p.Export
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	})
	tp, err := imp.Import("time")
	if err != nil {
		t.Fatal(err)
	}
	return imp, tp.Scope().Lookup("Duration").Type()
}

// importerMap resolves a package's import paths through its ImportMap
// (vendored or replaced paths) before importing.
type importerMap struct {
	types.Importer
	m map[string]string
}

func (i importerMap) Import(path string) (*types.Package, error) {
	if p, ok := i.m[path]; ok {
		path = p
	}
	return i.Importer.Import(path)
}
