package config

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// The policy reference (docs/configuration.md) and the JSON Schema for
// editors (docs/config.schema.json) are generated from the policy types:
// their yaml tags, their doc comments, the defaults the package fills in,
// the enum constants and RestartOnly. TestPolicyReference fails when
// either file drifts from the code; -update-docs rewrites both:
//
//	go test ./internal/config -run TestPolicyReference -update-docs
var updateDocs = flag.Bool("update-docs", false, "rewrite docs/configuration.md and docs/config.schema.json")

const (
	referencePath = "../../docs/configuration.md"
	schemaPath    = "../../docs/config.schema.json"
)

// docsPolicy holds every optional section with its required keys only:
// parsed, it shows the default of every key, items of lists and maps
// included.
const docsPolicy = `
upstreams:
  - url: http://127.0.0.1:8000
    sources: [{kind: vllm, url: http://127.0.0.1:8000/metrics}]
server: {tls: {cert_file: /tls.crt, key_file: /tls.key}}
pressure: {sources: [{kind: dcgm, url: http://127.0.0.1:9400/metrics}]}
fast_breaker: {per_client: {header: Authorization, qps: 1}}
classes: {default: MODEL, list: [{name: MODEL}]}
model_limits: {MODEL: {qps: 1}}
fairness: {tenants: [{name: NAME, key: "sha256:0000000000000000000000000000000000000000000000000000000000000000"}]}
quotas: {per_client: {}, clients: [{key: "sha256:0000000000000000000000000000000000000000000000000000000000000000"}], classes: {MODEL: {}}, models: {MODEL: {}}}
cluster: {redis: {url: redis://127.0.0.1:6379/0}}
hooks: {degraded: [{url: /x}]}
`

// givenPaths lists the key paths docsPolicy sets: each is required where it
// appears, so it has no default to show.
func givenPaths(t *testing.T) map[string]bool {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(docsPolicy), &v); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	var visit func(path string, v any)
	visit = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if path == "model_limits" {
					k = "<name>"
				}
				visit(join(path, k), e)
			}
		case []any:
			for _, e := range x {
				visit(path+"[]", e)
			}
		default:
			out[path] = true
		}
	}
	visit("", v)
	return out
}

// keyDoc is one key of the reference.
type keyDoc struct {
	path, kind, def, valid, reload, doc string
}

// validRange probes the loader for what a numeric key accepts, with
// docsPolicy's other keys at their defaults: its lower bound from −1, 0
// and the smallest step above 0 ("≥ 0", "> 0", "≥ 1"), and an upper bound
// of 1 for fractions ("< 1", "≤ 1") or "bounded" when a huge value is
// refused (the meaning says by what). "" when the key cannot be set on
// its own (a list item or map entry docsPolicy does not hold) or the
// loader takes any value.
func validRange(t *testing.T, path, kind string) string {
	t.Helper()
	var neg, zero, small, huge any
	switch kind {
	case "integer":
		neg, zero, small, huge = -1, 0, 1, 1<<40
	case "number":
		neg, zero, small, huge = -1, 0, 0.001, 1e12
	case "duration":
		neg, zero, small, huge = "-1s", "0s", "1ms", "100000h"
	default:
		return ""
	}
	accepts := func(v any) (bool, bool) {
		var doc any
		if err := yaml.Unmarshal([]byte(docsPolicy), &doc); err != nil {
			t.Fatal(err)
		}
		if !setPath(doc, strings.Split(strings.ReplaceAll(path, "<name>", "MODEL"), "."), v) {
			return false, false
		}
		b, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Parse(b)
		return err == nil, true
	}
	n, ok := accepts(neg)
	if !ok {
		return ""
	}
	z, _ := accepts(zero)
	sm, _ := accepts(small)
	var parts []string
	switch {
	case n:
	case z:
		parts = append(parts, "≥ 0")
	case sm && kind == "integer":
		parts = append(parts, "≥ 1")
	case sm:
		parts = append(parts, "> 0")
	}
	if h, _ := accepts(huge); !h {
		switch one, _ := accepts(1); {
		case kind != "number":
			parts = append(parts, "bounded")
		case one:
			if over, _ := accepts(1.001); !over {
				parts = append(parts, "≤ 1")
			} else {
				parts = append(parts, "bounded")
			}
		default:
			if under, _ := accepts(0.999); under {
				parts = append(parts, "< 1")
			} else {
				parts = append(parts, "bounded")
			}
		}
	}
	return strings.Join(parts, ", ")
}

// unitOf names a numeric key's unit where its name says it (durations say
// theirs in their type).
func unitOf(path string) string {
	key := path[strings.LastIndex(path, ".")+1:]
	switch {
	case strings.HasSuffix(key, "_bytes"):
		return " (bytes)"
	case strings.HasSuffix(key, "_tokens"):
		return " (tokens)"
	case key == "qps":
		return " (requests/s)"
	case key == "burst":
		return " (requests)"
	}
	return ""
}

// setPath sets the key at keys in doc (maps; "x[]" is x's first item),
// creating maps on the way; false when a list item is missing.
func setPath(doc any, keys []string, v any) bool {
	m, ok := doc.(map[string]any)
	if !ok {
		return false
	}
	k := keys[0]
	if name, found := strings.CutSuffix(k, "[]"); found {
		list, ok := m[name].([]any)
		if !ok || len(list) == 0 || len(keys) == 1 {
			return false
		}
		return setPath(list[0], keys[1:], v)
	}
	if len(keys) == 1 {
		m[k] = v
		return true
	}
	next, ok := m[k].(map[string]any)
	if !ok {
		if m[k] != nil {
			return false
		}
		next = map[string]any{}
		m[k] = next
	}
	return setPath(next, keys[1:], v)
}

// docSource reads the doc comments of the package's types and the values
// of its string enums from its Go files.
type docSource struct {
	t     *testing.T
	given map[string]bool // paths docsPolicy sets: required
	// perSignal marks the keys of a rule whose defaults differ by signal
	// (pressure.rules.<signal>): their default is "per signal", shown in
	// docs/signals.md, and the schema gives each signal's under its name.
	perSignal bool
	fields    map[string]map[string]string // type → field → comment
	types     map[string]string            // type → its own doc
	enums     map[string][]string          // type → its constants' values
}

func readDocSource(t *testing.T) docSource {
	t.Helper()
	fset := token.NewFileSet()
	ds := docSource{fields: map[string]map[string]string{}, types: map[string]string{}, enums: map[string][]string{}}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					ds.types[s.Name.Name] = clean(gd.Doc.Text())
					st, ok := s.Type.(*ast.StructType)
					if !ok {
						continue
					}
					m := map[string]string{}
					for _, fl := range st.Fields.List {
						text := fl.Doc.Text()
						if text == "" {
							text = fl.Comment.Text()
						}
						for _, n := range fl.Names {
							m[n.Name] = clean(text)
						}
					}
					ds.fields[s.Name.Name] = m
				case *ast.ValueSpec:
					id, ok := s.Type.(*ast.Ident)
					if gd.Tok != token.CONST || !ok {
						continue
					}
					for _, v := range s.Values {
						if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							val, _ := strconv.Unquote(lit.Value)
							ds.enums[id.Name] = append(ds.enums[id.Name], val)
						}
					}
				}
			}
		}
	}
	return ds
}

// clean joins a comment's lines into one.
func clean(s string) string { return strings.Join(strings.Fields(s), " ") }

// walk visits every key under v (of type t) at path, appending its doc
// and returning its JSON Schema.
func (ds docSource) walk(path string, t reflect.Type, v reflect.Value, doc string, out *[]keyDoc) map[string]any {
	if t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		var ev reflect.Value
		if v.IsValid() && !v.IsNil() {
			ev = v.Elem()
		}
		s := ds.walk(path, t.Elem(), ev, doc, out)
		return s
	}
	kind, schema := ds.scalar(t)
	if schema != nil {
		if path != "" {
			def := showDefault(t, v)
			switch {
			case ds.given[path]:
				def = "required"
			case ds.perSignal:
				def = signalsLink
			case strings.Contains(doc, "Empty in the file means"): // derived from other keys
				def = `""`
			default:
				if d, ok := defaultValue(t, v); ok {
					schema["default"] = d
				}
			}
			valid := ""
			if def != "required" && !strings.Contains(path, "<signal>") {
				valid = validRange(ds.t, path, kind)
			}
			kind += unitOf(path)
			*out = append(*out, keyDoc{path: path, kind: kind, def: def, valid: valid, reload: reloadOf(path), doc: doc})
			if doc != "" {
				schema["description"] = doc
			}
		}
		return schema
	}
	switch t.Kind() {
	case reflect.Struct:
		props := map[string]any{}
		for i := range t.NumField() {
			f := t.Field(i)
			tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
			if !f.IsExported() || tag == "" || tag == "-" {
				continue
			}
			var fv reflect.Value
			if v.IsValid() {
				fv = v.Field(i)
			}
			props[tag] = ds.walk(join(path, tag), f.Type, fv, ds.fields[t.Name()][f.Name], out)
		}
		// null: a key written with nothing after it, which the loader reads
		// as the defaults.
		s := map[string]any{"type": []any{"object", "null"}, "properties": props, "additionalProperties": false}
		if doc != "" {
			s["description"] = doc
		}
		return s
	case reflect.Slice:
		var ev reflect.Value
		if v.IsValid() && v.Len() > 0 {
			ev = v.Index(0)
		}
		if path != "" {
			*out = append(*out, keyDoc{path: path, kind: "list", def: "", reload: reloadOf(path), doc: doc})
		}
		items := ds.walk(path+"[]", t.Elem(), ev, "", out)
		s := map[string]any{"type": "array", "items": items}
		if doc != "" {
			s["description"] = doc
		}
		return s
	case reflect.Map:
		var ev reflect.Value
		key := "<name>"
		if v.IsValid() && v.Len() > 0 {
			keys := v.MapKeys()
			slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
			ev = v.MapIndex(keys[0])
		}
		*out = append(*out, keyDoc{path: path, kind: "map", reload: reloadOf(path), doc: doc})
		var bySignal map[string]any
		if t.Key() == reflect.TypeFor[Signal]() {
			key = "<signal>"
			bySignal = ds.signalDefaults(path, t.Elem(), v)
			if bySignal != nil {
				// Each signal has its own default rule (or none): the first
				// entry's would be wrong for every other signal (issue 35).
				ds.perSignal, ev = true, reflect.Value{}
			}
		}
		s := map[string]any{"type": []any{"object", "null"}, "additionalProperties": ds.walk(path+"."+key, t.Elem(), ev, "", out)}
		if bySignal != nil {
			s["properties"] = bySignal
		}
		if vals := ds.enums[t.Key().Name()]; len(vals) > 0 {
			s["propertyNames"] = map[string]any{"enum": vals}
		}
		if doc != "" {
			s["description"] = doc
		}
		return s
	}
	panic("config docs: unhandled type " + t.String())
}

// signalsLink is the Default of a rule key whose default differs by signal.
const signalsLink = "per signal: [signals.md](signals.md)"

// signalDefaults returns, for a map of rules by signal that holds defaults
// (v), the schema of each signal's rule with that signal's defaults, keyed
// by signal; nil when v holds none. Signals without a default rule are left
// to the map's additionalProperties, which has no defaults.
func (ds docSource) signalDefaults(path string, elem reflect.Type, v reflect.Value) map[string]any {
	if !v.IsValid() || v.Len() == 0 {
		return nil
	}
	out := map[string]any{}
	for _, sig := range Signals() {
		if r := v.MapIndex(reflect.ValueOf(sig)); r.IsValid() {
			var discard []keyDoc
			s := ds.walk(path+"."+string(sig), elem, r, "", &discard)
			s["description"] = "The default rule of " + string(sig) + " (docs/signals.md); a rule written here replaces it whole, {} or null removes it."
			out[string(sig)] = s
		}
	}
	return out
}

// scalar returns the kind name and schema of a leaf type, or nil.
func (ds docSource) scalar(t reflect.Type) (string, map[string]any) {
	if t == durationType {
		return "duration", map[string]any{"type": "string",
			"pattern": `^(0|-?([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$`}
	}
	if t.Kind() == reflect.Pointer && t.Elem().Kind() != reflect.Struct {
		kind, s := ds.scalar(t.Elem()) // unset: null in the file, as no key
		if s != nil {
			s["type"] = []any{s["type"], "null"}
		}
		return kind, s
	}
	switch t.Kind() {
	case reflect.String:
		if vals := ds.enums[t.Name()]; len(vals) > 0 {
			return "one of " + strings.Join(vals, ", "), map[string]any{"type": "string", "enum": vals}
		}
		return "string", map[string]any{"type": "string"}
	case reflect.Bool:
		return "bool", map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int64:
		return "integer", map[string]any{"type": "integer"}
	case reflect.Float64:
		return "number", map[string]any{"type": "number"}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			_, item := ds.scalar(t.Elem())
			return "list of strings", map[string]any{"type": "array", "items": item}
		}
	case reflect.Map:
		if t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.String {
			return "map of strings", map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}}
		}
	}
	return "", nil
}

// defaultValue is v as the schema's default, when it has one.
func defaultValue(t reflect.Type, v reflect.Value) (any, bool) {
	if !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
		return nil, false
	}
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if t == durationType {
		return formatDuration(time.Duration(v.Int())), true // as -print-config writes it
	}
	switch v.Kind() {
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			return nil, false
		}
	case reflect.String: // an enum shows as its value
		return v.String(), true
	}
	return v.Interface(), true
}

// showDefault is v for the reference's table.
func showDefault(t reflect.Type, v reflect.Value) string {
	d, ok := defaultValue(t, v)
	if !ok {
		if v.IsValid() && (v.Kind() == reflect.Slice || v.Kind() == reflect.Map) {
			return "`[]`"
		}
		return "—"
	}
	if s, ok := d.(string); ok {
		if s == "" {
			return `""`
		}
		return "`" + s + "`"
	}
	b, _ := json.Marshal(d)
	return "`" + string(b) + "`"
}

// reloadOf says whether a change of path applies at reload or at restart.
func reloadOf(path string) string {
	p := strings.ReplaceAll(strings.ReplaceAll(path, "[]", "[0]"), "<name>", "x")
	p = strings.ReplaceAll(p, "<signal>", "x")
	if len(RestartOnly([]string{p})) > 0 {
		return "restart"
	}
	return "reload"
}

// generateDocs returns the reference page and the schema.
func generateDocs(t *testing.T) ([]byte, []byte) {
	t.Helper()
	cfg, err := Parse([]byte(docsPolicy))
	if err != nil {
		t.Fatalf("docsPolicy: %v", err)
	}
	ds := readDocSource(t)
	ds.given = givenPaths(t)
	ds.t = t
	var keys []keyDoc
	schema := ds.walk("", reflect.TypeFor[Config](), reflect.ValueOf(*cfg), "", &keys)
	schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	schema["$id"] = "https://github.com/gatekeeper-dev/gatekeeper/docs/config.schema.json"
	schema["title"] = "gatekeeper policy"
	schema["description"] = "A gatekeeper policy file (config.yaml). Generated from package config; see docs/configuration.md."
	schema["required"] = []string{"upstreams"}
	js, err := json.MarshalIndent(schema, "", "  ")
	if err != nil {
		t.Fatal(err)
	}

	var md bytes.Buffer
	md.WriteString(`# Policy reference

Every key of the policy file, generated from the policy types in package
config (their comments, the defaults the package fills in, the enum values)
by ` + "`go test ./internal/config -run TestPolicyReference -update-docs`" + `; a test
fails when this page or [config.schema.json](config.schema.json) drifts from
the code. The annotated default is the repository's ` + "`config.yaml`" + `; a
key left out takes the default shown. Durations are Go durations (` + "`500ms`" + `,
` + "`2s`" + `, ` + "`10m`" + `); unknown keys are errors. An error names the
file, the key and its line, numbered as YAML numbers lines: a CR LF, LF,
CR, NEL, LS or PS ends one.
*Reload* keys apply when the file changes or on SIGHUP; *restart* keys only
when the process starts again (a reload logs them as pending). Defaults of
list items and optional sections are what an item gets when it sets only
its required keys. *Valid* is what the loader accepts for a numeric key,
found by trying values on it with every other key at its default (−1, 0
and the smallest step above 0 for the lower bound; 1 for fractions; a huge
value for the rest): "bounded" means a limit the key's meaning states,
often another key. ` + "`gatekeeper -check`" + ` checks them all.

Editors that speak the YAML language server validate a policy as you type:
config.yaml's first line names the schema.
`)
	section := ""
	for _, k := range keys {
		top, _, _ := strings.Cut(strings.TrimSuffix(k.path, "[]"), ".")
		top = strings.TrimSuffix(top, "[]")
		if top != section {
			section = top
			fmt.Fprintf(&md, "\n## `%s`\n\n", section)
			if d := ds.fields["Config"][fieldOf(section)]; d != "" {
				md.WriteString(d + "\n\n")
			}
			md.WriteString("| Key | Type | Default | Valid | Applies | Meaning |\n|---|---|---|---|---|---|\n")
		}
		fmt.Fprintf(&md, "| `%s` | %s | %s | %s | %s | %s |\n", k.path, k.kind, k.def, k.valid, k.reload,
			strings.ReplaceAll(k.doc, "|", `\|`))
	}
	return md.Bytes(), append(js, '\n')
}

// fieldOf is the Config field whose yaml tag is tag.
func fieldOf(tag string) string {
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("yaml") == tag {
			return t.Field(i).Name
		}
	}
	return ""
}

// TestPolicyReference: docs/configuration.md and docs/config.schema.json
// are what the code generates.
func TestPolicyReference(t *testing.T) {
	md, js := generateDocs(t)
	if *updateDocs {
		if err := os.WriteFile(referencePath, md, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(schemaPath, js, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	for path, want := range map[string][]byte{referencePath: md, schemaPath: js} {
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s differs from the code (err %v); run: go test ./internal/config -run TestPolicyReference -update-docs", path, err)
		}
	}
}

// yamlToJSON decodes a YAML document into the values a JSON Schema
// validator takes.
func yamlToJSON(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// shippedPolicies are the policy files this repository ships or tests as
// good, by name: the root config.yaml, config/testdata's *.good.yaml and
// the policies inside the Kubernetes ConfigMaps.
func shippedPolicies(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	read := func(path string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	out["../../config.yaml"] = read("../../config.yaml")
	good, err := filepath.Glob("testdata/*.good.yaml")
	if err != nil || len(good) == 0 {
		t.Fatalf("testdata/*.good.yaml: %v (%d files)", err, len(good))
	}
	for _, p := range good {
		out[p] = read(p)
	}
	for _, p := range []string{"../../deploy/kubernetes/configmap.yaml", "../../deploy/kubernetes/components/redis/policy.yaml"} {
		var cm struct {
			Data map[string]string `yaml:"data"`
		}
		if err := yaml.Unmarshal(read(p), &cm); err != nil || cm.Data["config.yaml"] == "" {
			t.Fatalf("%s: no data.config.yaml (%v)", p, err)
		}
		out[p] = []byte(cm.Data["config.yaml"])
	}
	return out
}

// compileSchema compiles docs/config.schema.json.
func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("config.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("config.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// TestPoliciesMatchSchema: every policy the repository ships or tests as
// good validates against docs/config.schema.json, and the bad files whose
// fault is the shape (an unknown key, a wrong type, an unknown enum value)
// do not: the schema is neither looser nor stricter than the loader.
func TestPoliciesMatchSchema(t *testing.T) {
	sch := compileSchema(t)
	for name, data := range shippedPolicies(t) {
		if _, err := Parse(data); err != nil {
			t.Errorf("%s does not load: %v", name, err)
		}
		if err := sch.Validate(yamlToJSON(t, data)); err != nil {
			t.Errorf("%s does not match the schema: %v", name, err)
		}
	}
	for _, name := range []string{"unknown-key", "unknown-nested", "unknown-top", "wrong-type", "bad-enum", "bad-duration"} {
		data, err := os.ReadFile("testdata/" + name + ".bad.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(yamlToJSON(t, data)); err == nil {
			t.Errorf("testdata/%s.bad.yaml matches the schema, want it refused as the loader refuses it", name)
		}
	}
}

// TestConfigNamesTheSchema: config.yaml's first line points editors at
// the schema.
func TestConfigNamesTheSchema(t *testing.T) {
	b, err := os.ReadFile("../../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := bytes.Cut(b, []byte("\n"))
	if want := "# yaml-language-server: $schema=docs/config.schema.json"; string(first) != want {
		t.Errorf("config.yaml's first line = %q, want %q", first, want)
	}
}

// TestSchemaRuleDefaults: the schema gives each signal's rule the defaults
// of that signal (none for a signal without a default rule), not one
// signal's for all (issue 35: degrade showed alloc_retry_rate's 0.01 for
// every signal).
func TestSchemaRuleDefaults(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	obj := func(m any, keys ...string) map[string]any {
		for _, k := range keys {
			mm, _ := m.(map[string]any)
			m = mm[k] // nil when absent
		}
		out, _ := m.(map[string]any)
		return out
	}
	rules := obj(schema, "properties", "pressure", "properties", "rules")
	defaults := builtin().Pressure.Rules
	for _, sig := range Signals() {
		s := obj(rules, "properties", string(sig))
		if s == nil {
			s = obj(rules, "additionalProperties")
		}
		r := defaults[sig]
		for key, want := range map[string]*float64{"degrade": r.Degrade, "shed": r.Shed} {
			got, ok := obj(s, "properties", key)["default"]
			switch {
			case want == nil && ok:
				t.Errorf("schema: pressure.rules.%s.%s has default %v, want none", sig, key, got)
			case want != nil && got != *want:
				t.Errorf("schema: pressure.rules.%s.%s has default %v, want %v", sig, key, got, *want)
			}
		}
		if got, want := obj(s, "properties", "for")["default"], formatDuration(r.For); r.Degrade != nil && got != want {
			t.Errorf("schema: pressure.rules.%s.for has default %v, want %s", sig, got, want)
		}
	}
	ref, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"degrade", "shed", "horizon", "for"} {
		row := "| `pressure.rules.<signal>." + key + "` | "
		_, rest, ok := bytes.Cut(ref, []byte(row))
		if _, def, _ := bytes.Cut(rest, []byte(" | ")); !ok || !bytes.HasPrefix(def, []byte(signalsLink+" |")) {
			t.Errorf("%s: the row of pressure.rules.<signal>.%s does not give its default as %q", referencePath, key, signalsLink)
		}
	}
}
