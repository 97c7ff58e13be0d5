package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// FieldError is one problem with one key. Load and Validate return every
// FieldError they find joined with errors.Join; find them with errors.As or
// by unwrapping the joined error's Unwrap() []error.
type FieldError struct {
	// Path is the key path, such as "upstreams[1].url"; empty for the document.
	Path string
	// Line is the 1-based line in the file, or 0 when the value did not come
	// from a file (a default, or a Config built in code).
	Line int
	// Msg says what is wrong.
	Msg string
}

// Error reads "config: line 12: upstreams[1].url: scheme "ftp" is not http or https".
func (e *FieldError) Error() string { return Located("config", e.Line, e.Path, e.Msg) }

// Located is "who: line N: path: msg", leaving out a line of 0 and an
// empty path: the shape of every finding about a key (errors, warnings,
// and -check's lines, which name the file).
func Located(who string, line int, path, msg string) string {
	var b strings.Builder
	b.WriteString(who + ": ")
	if line > 0 {
		b.WriteString("line " + strconv.Itoa(line) + ": ")
	}
	if path != "" {
		b.WriteString(path + ": ")
	}
	b.WriteString(msg)
	return b.String()
}

// unknownKey reports key k found in the mapping at path, decoded into t.
func unknownKey(k *yaml.Node, path string, t reflect.Type) error {
	where := "at top level"
	if path != "" {
		where = "in " + path
	}
	msg := fmt.Sprintf("unknown key %s %s", short(k.Value), where)
	if s := suggest(k.Value, t); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	// Path stays empty: the key is not part of the schema, and the message
	// already names where it was found.
	return &FieldError{Line: k.Line, Msg: msg}
}

// suggest returns the key of t closest to key, if it is close enough to be
// a likely typo.
func suggest(key string, t reflect.Type) string {
	best, bestDist := "", 3
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" {
			continue
		}
		if d := distance(strings.ToLower(key), name); d < bestDist {
			best, bestDist = name, d
		}
	}
	return best
}

// distance is the Levenshtein edit distance of a and b (bytes).
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Line returns the line of the key at path in the file c was decoded from,
// or of its nearest ancestor written there ("upstreams[0].min_inflight"
// falls back to "upstreams[0]"). It returns 0 when neither came from a file.
func (c *Config) Line(path string) int {
	for path != "" {
		if l, ok := c.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return 0
		}
		path = path[:i]
	}
	return 0
}

// written reports whether the file c was decoded from sets the key at path
// itself (not only an ancestor of it).
func (c *Config) written(path string) bool {
	_, ok := c.lines[path]
	return ok
}
