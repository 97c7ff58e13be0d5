package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// maxNodes bounds the nodes one decode visits, so aliases cannot expand a
// small file into an enormous one.
const maxNodes = 1 << 18

// maxMergeDepth and maxMerges bound merge keys, which expand aliases: an
// anchor may even merge itself.
const (
	maxMergeDepth = 8
	maxMerges     = 1 << 10
)

var (
	durationType  = reflect.TypeFor[time.Duration]()
	defaulterType = reflect.TypeFor[defaulter]()
)

// decoder walks a yaml.Node tree and a Go value side by side. Unlike
// yaml.v3's own decoder it reports every unknown key, duplicate key and bad
// value with its key path and line, and it records the line of each path.
type decoder struct {
	lines  map[string]int
	errs   []error
	nodes  int
	merges int
	tooBig bool
}

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	d.errs = append(d.errs, &FieldError{Path: path, Line: n.Line, Msg: fmt.Sprintf(format, args...)})
}

// decode stores n into v, which must be settable. A null leaves v as it is,
// so a key written without a value keeps its default.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if d.nodes++; d.nodes > maxNodes {
		if !d.tooBig {
			d.tooBig = true
			d.errs = append(d.errs, fmt.Errorf("config: document too large (more than %d nodes once aliases are expanded)", maxNodes))
		}
		return
	}
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return
		}
		n = n.Content[0]
		for n.Kind == yaml.AliasNode {
			n = n.Alias
		}
	}
	if isNull(n) {
		return
	}
	t := v.Type()
	switch {
	case t == durationType:
		d.duration(n, v, path)
	case t.Kind() == reflect.Struct:
		d.mapping(n, v, path)
	case t.Kind() == reflect.Pointer:
		e := reflect.New(t.Elem())
		if e.Type().Implements(defaulterType) {
			e.Interface().(defaulter).setDefaults()
		}
		d.decode(n, e.Elem(), path)
		v.Set(e)
	case t.Kind() == reflect.Slice:
		d.sequence(n, v, path)
	case t.Kind() == reflect.Map:
		d.dict(n, v, path)
	default:
		d.scalar(n, v, path)
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return short(n.Value)
}

// short quotes s for a message, cut to a readable length.
func short(s string) string {
	const limit = 80
	if len(s) > limit {
		return fmt.Sprintf("%q…", s[:limit])
	}
	return fmt.Sprintf("%q", s)
}

func (d *decoder) duration(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "want a duration such as 500ms or 30s, got %s", kindName(n))
		return
	}
	dur, err := time.ParseDuration(n.Value)
	if err != nil {
		d.fail(n, path, "invalid duration %s (want a Go duration such as 500ms or 30s)", short(n.Value))
		return
	}
	v.SetInt(int64(dur))
}

func (d *decoder) scalar(n *yaml.Node, v reflect.Value, path string) {
	want := map[reflect.Kind]string{
		reflect.String: "a string", reflect.Int: "an integer", reflect.Int64: "an integer",
		reflect.Float64: "a number", reflect.Bool: "true or false",
	}[v.Kind()]
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "want %s, got %s", want, kindName(n))
		return
	}
	if v.Kind() == reflect.String {
		v.SetString(n.Value)
		return
	}
	isInt := v.Kind() == reflect.Int || v.Kind() == reflect.Int64
	p := reflect.New(v.Type())
	// yaml.v3 would truncate 1.5 into an int; a count must be written as one.
	if err := n.Decode(p.Interface()); err != nil || isInt && n.ShortTag() != "!!int" {
		d.fail(n, path, "want %s, got %s", want, short(n.Value))
		return
	}
	v.Set(p.Elem())
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "want a list, got %s", kindName(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, e := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		d.lines[p] = e.Line
		if el := s.Index(i).Addr(); el.Type().Implements(defaulterType) {
			el.Interface().(defaulter).setDefaults()
		}
		d.decode(e, s.Index(i), p)
	}
	v.Set(s)
}

// pairs returns n's key/value pairs with YAML merge keys ("<<") expanded
// first, so explicit keys override merged ones; it reports duplicate keys.
func (d *decoder) pairs(n *yaml.Node, path string, depth int) [][2]*yaml.Node {
	var merged, own [][2]*yaml.Node
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			for val.Kind == yaml.AliasNode {
				val = val.Alias
			}
			srcs := []*yaml.Node{val}
			if val.Kind == yaml.SequenceNode {
				// In <<: [*a, *b] the keys of a win: decode b's first.
				srcs = slices.Clone(val.Content)
				slices.Reverse(srcs)
			}
			for _, m := range srcs {
				for m.Kind == yaml.AliasNode {
					m = m.Alias
				}
				if m.Kind != yaml.MappingNode {
					d.fail(k, path, "merge key (<<) needs a mapping, got %s", kindName(m))
					continue
				}
				if d.merges++; d.merges > maxMerges {
					if d.merges == maxMerges+1 {
						d.fail(k, path, "more than %d merges (<<) in one file", maxMerges)
					}
					continue
				}
				if depth >= maxMergeDepth {
					d.fail(k, path, "merge keys (<<) nest deeper than %d", maxMergeDepth)
					continue
				}
				merged = append(merged, d.pairs(m, path, depth+1)...)
			}
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(k, path, "keys must be plain strings, got %s", kindName(k))
			continue
		}
		if seen[k.Value] {
			d.errs = append(d.errs, &FieldError{Path: join(path, k.Value), Line: k.Line, Msg: "duplicate key"})
			continue
		}
		seen[k.Value] = true
		own = append(own, [2]*yaml.Node{k, val})
	}
	return append(merged, own...)
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping, got %s", kindName(n))
		return
	}
	t := v.Type()
	for _, kv := range d.pairs(n, path, 0) {
		k, val := kv[0], kv[1]
		i := fieldIndex(t, k.Value)
		if i < 0 {
			d.errs = append(d.errs, unknownKey(k, path, t))
			continue
		}
		p := join(path, k.Value)
		d.lines[p] = k.Line
		d.decode(val, v.Field(i), p)
	}
}

// dict decodes a map. Each entry replaces the existing value for its key
// (for pressure.rules: a rule replaces the default rule of that signal), and
// a null entry deletes the key.
func (d *decoder) dict(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping, got %s", kindName(n))
		return
	}
	t := v.Type()
	if v.IsNil() {
		v.Set(reflect.MakeMap(t))
	}
	for _, kv := range d.pairs(n, path, 0) {
		k, val := kv[0], kv[1]
		p := join(path, k.Value)
		d.lines[p] = k.Line
		key := reflect.ValueOf(k.Value).Convert(t.Key())
		for val.Kind == yaml.AliasNode {
			val = val.Alias
		}
		if isNull(val) {
			v.SetMapIndex(key, reflect.Value{})
			continue
		}
		e := reflect.New(t.Elem()).Elem()
		d.decode(val, e, p)
		v.SetMapIndex(key, e)
	}
}

// fieldIndex returns the index of t's field tagged name, or -1.
func fieldIndex(t reflect.Type, name string) int {
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag != "" && tag == name {
			return i
		}
	}
	return -1
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
