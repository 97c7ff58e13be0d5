package config

import (
	"errors"
	"slices"
	"testing"
)

// TestSyntaxErrorLine: a YAML syntax error is one *FieldError naming the
// line the problem is on. yaml.v3's own message names the line where the
// enclosing construct began, 0-based for parser errors (issue 35, item 13):
// the rows marked "yaml:" say what it reported.
func TestSyntaxErrorLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		line int
		msg  string
	}{
		{name: "tab indents a key", // yaml: line 2
			yaml: "a: 1\nb: 2\n\tc: 3\n", line: 3, msg: "found a tab character that violates indentation"},
		{name: "tab indents a key, line 2",
			yaml: "a: 1\n\tb: 2\n", line: 2, msg: "found a tab character that violates indentation"},
		{name: "tab indents a list item", // yaml: line 3
			yaml: "a:\n  - 1\n  - 2\n\t- 3\n", line: 4, msg: "found a tab character that violates indentation"},
		{name: "tab indents a nested mapping",
			yaml: "a: 1\nb:\n\tc: 2\n", line: 3, msg: "found character that cannot start any token"},
		{name: "tab on line 1", // yaml: no line
			yaml: "\ta: 1\n", line: 1, msg: "found character that cannot start any token"},
		{name: "tab in a block scalar's indentation",
			yaml: "a: |\n\tx\n", line: 2, msg: "found a tab character where an indentation space is expected"},
		{name: "key indented one space too few", // yaml: line 2
			yaml: "a:\n  b: 1\n c: 2\n", line: 3, msg: "did not find expected key"},
		{name: "list item after a mapping", // yaml: line 2
			yaml: "a: 1\nb: 2\n- c\n", line: 3, msg: "did not find expected key"},
		{name: "key indented under a scalar",
			yaml: "a: 1\nb: 2\n  c: 3\n", line: 3, msg: "mapping values are not allowed in this context"},
		{name: "reserved character",
			yaml: "a: 1\nb: 2\nc: @x\n", line: 3, msg: "found character that cannot start any token"},
		{name: "flow sequence never closed", // yaml: line 3
			yaml: "a: 1\nb: 2\nc: 3\nd: [1, 2\n", line: 4, msg: "did not find expected ',' or ']'"},
		{name: "flow mapping never closed, on the line it opens", // yaml: line 3
			yaml: "a: 1\nb: 2\nc: 3\nd: {x: 1\ne: 2\n", line: 4, msg: "did not find expected ',' or '}'"},
		{name: "flow sequence never closed, line 1",
			yaml: "upstreams: [\n", line: 1, msg: "did not find expected node content"},
		{name: "quote never closed, on the line it opens",
			yaml: "a: 1\nb: \"x\nc: 3\n", line: 2, msg: "found unexpected end of stream"},
		{name: "quote never closed, after a blank line",
			yaml: "a: 1\n\nb: 'x\n", line: 3, msg: "found unexpected end of stream"},
		{name: "unknown alias", // yaml: no line
			yaml: "a: 1\nb: *nope\n", line: 2, msg: "unknown anchor 'nope' referenced"},
		{name: "no newline at the end",
			yaml: "a: 1\nb: 2\n\tc: 3", line: 3, msg: "found a tab character that violates indentation"},
		{name: "CRLF line ends",
			yaml: "a: 1\r\nb: 2\r\n\tc: 3\r\n", line: 3, msg: "found a tab character that violates indentation"},
		{name: "CR line ends", // counting LF alone read line 1
			yaml: "a: 1\rb: 2\r\tc: 3\r", line: 3, msg: "found a tab character that violates indentation"},
		{name: "NEL and LS line ends",
			yaml: "a: 1\u0085b: 2\u2028\tc: 3\n", line: 3, msg: "found a tab character that violates indentation"},
		{name: "in the second document",
			yaml: "a: 1\n---\nb: 2\n\tc: 3\n", line: 4, msg: "found a tab character that violates indentation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.yaml))
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Parse(%q) = %v, want a *FieldError", tt.yaml, err)
			}
			want := &FieldError{Line: tt.line, Msg: "invalid YAML: " + tt.msg}
			if *fe != *want {
				t.Errorf("Parse(%q) = %q, want %q", tt.yaml, fe, want)
			}
		})
	}
}

// TestLineEnds: the config's lines are yaml's, which end at CR LF, LF, CR,
// NEL, LS and PS; a CR LF is one break, and a lone byte of a multi-byte
// break is not one.
func TestLineEnds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		data string
		want []int
	}{
		{"", nil},
		{"a", nil},
		{"a\n", []int{2}},
		{"a\r\nb\n", []int{3, 5}},
		{"a\rb\r", []int{2, 4}},
		{"\r\r\n\n", []int{1, 3, 4}},
		{"a\u0085b", []int{3}},
		{"\u2028\u2029x", []int{3, 6}},
		{"\xc2\xe2\x80x\xc2", nil},
		{"a\r", []int{2}},
	}
	for _, tt := range tests {
		if got := lineEnds([]byte(tt.data)); !slices.Equal(got, tt.want) {
			t.Errorf("lineEnds(%q) = %v, want %v", tt.data, got, tt.want)
		}
	}
}
