package config

import (
	"bytes"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Marshal returns c as a policy file with every key written out: the
// effective policy, each default filled in, in the order of the schema
// (map keys sorted). For a c that Parse returned, Parse(Marshal(c)) yields
// the same policy (Diff reports nothing).
//
// What it writes: durations in their largest whole unit (90s, 1500ms);
// derived values as derived (upstream and source names, bursts); an
// optional section (server.tls, fast_breaker.per_client, classes, cluster)
// only when set, and a rule threshold only when set; a default
// pressure.rules signal that c has no rule for as {}, since leaving it out
// would bring the default rule back. Aliases and merge keys are written
// expanded, so a file that leans on them prints longer than it is.
func Marshal(c *Config) ([]byte, error) {
	root := encoder{}.node(reflect.ValueOf(c).Elem(), false)
	if rules := mapValue(root, "pressure", "rules"); rules != nil {
		for sig := range builtin().Pressure.Rules {
			if _, ok := c.Pressure.Rules[sig]; !ok {
				rules.Content = append(rules.Content, scalar(string(sig)), &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle})
				rules.Style = 0 // no longer {}
			}
		}
		sortPairs(rules)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("config: marshal: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: marshal: %w", err)
	}
	return buf.Bytes(), nil
}

// encoder turns values of the schema into YAML nodes. With redact, it
// writes what Change may log: values under a log:"redact" key (secret) and
// URL passwords and query values are Redacted.
type encoder struct{ redact bool }

// node turns one value of the schema into a node; secret says v lies under
// a log:"redact" key.
func (e encoder) node(v reflect.Value, secret bool) *yaml.Node {
	t := v.Type()
	switch {
	case t == durationType:
		return e.leaf(formatDuration(time.Duration(v.Int())), secret)
	case t.Kind() == reflect.Pointer:
		return e.node(v.Elem(), secret)
	case t.Kind() == reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode}
		if t == reflect.TypeFor[Rule]() {
			n.Style = yaml.FlowStyle // fragmentation: {degrade: 1.2, shed: 1.5, …}
		}
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			f := v.Field(i)
			if name == "" || f.Kind() == reflect.Pointer && f.IsNil() {
				continue
			}
			n.Content = append(n.Content, scalar(name), e.node(f, secret || redacted(t.Field(i))))
		}
		return n
	case t.Kind() == reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		if k := t.Elem().Kind(); v.Len() == 0 || k != reflect.Struct {
			n.Style = yaml.FlowStyle // [], gpus: ["0", "1"]
		}
		for i := range v.Len() {
			n.Content = append(n.Content, e.node(v.Index(i), secret))
		}
		return n
	case t.Kind() == reflect.Map:
		n := &yaml.Node{Kind: yaml.MappingNode}
		if v.Len() == 0 {
			n.Style = yaml.FlowStyle // {}
		}
		for _, k := range v.MapKeys() {
			n.Content = append(n.Content, scalar(k.String()), e.node(v.MapIndex(k), secret))
		}
		sortPairs(n)
		return n
	}
	switch v.Kind() {
	case reflect.String:
		s := v.String()
		if e.redact && !secret {
			s = redactURL(s)
		}
		n := e.leaf(s, secret)
		n.Tag = "!!str"
		return n
	case reflect.Bool:
		return e.leaf(strconv.FormatBool(v.Bool()), secret)
	case reflect.Int, reflect.Int64:
		return e.leaf(strconv.FormatInt(v.Int(), 10), secret)
	case reflect.Float64:
		return e.leaf(strconv.FormatFloat(v.Float(), 'g', -1, 64), secret)
	}
	// The schema holds no other kind; a new one must be added above.
	panic(fmt.Sprintf("config: Marshal: no encoding for %s", t))
}

// leaf is a scalar node of value s, Redacted when e redacts a secret that
// is not empty (an empty one gives nothing away).
func (e encoder) leaf(s string, secret bool) *yaml.Node {
	if e.redact && secret && s != "" {
		s = Redacted
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Value: s}
}

// scalar is a string node: the encoder quotes it where it would read as
// another type ("0", "true", "").
func scalar(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

// mapValue returns the node at keys under the mapping n, or nil.
func mapValue(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		if next == nil || next.Kind != yaml.MappingNode {
			return nil
		}
		n = next
	}
	return n
}

// sortPairs orders a mapping node's pairs by key.
func sortPairs(n *yaml.Node) {
	pairs := map[string][2]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		pairs[n.Content[i].Value] = [2]*yaml.Node{n.Content[i], n.Content[i+1]}
	}
	n.Content = n.Content[:0]
	for _, k := range slices.Sorted(maps.Keys(pairs)) {
		n.Content = append(n.Content, pairs[k][0], pairs[k][1])
	}
}

// formatDuration writes d in its largest whole unit, as the annotated
// default does (10m, 500ms), where time.Duration.String would write 10m0s.
func formatDuration(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		unit string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}} {
		if d != 0 && d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.unit
		}
	}
	if d == 0 {
		return "0s"
	}
	return strconv.FormatInt(int64(d), 10) + "ns"
}
