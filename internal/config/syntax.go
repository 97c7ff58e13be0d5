package config

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// documents decodes data's first YAML document into root (nil for an
// empty file) and the start of a second one, if any, into extra. err is
// yaml's error for a file that is not YAML.
func documents(data []byte) (root, extra *yaml.Node, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	root = new(yaml.Node)
	if err := dec.Decode(root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	extra = new(yaml.Node)
	switch err := dec.Decode(extra); {
	case errors.Is(err, io.EOF):
		return root, nil, nil
	case err != nil:
		return nil, nil, err
	}
	return root, extra, nil
}

// syntaxError is yaml's error err about data as a *FieldError naming the
// line the problem is on.
//
// yaml.v3 does not number that line (issue 35, item 13): its message names
// the line where the enclosing construct began, 0-based for parser errors
// and 1-based for scanner errors, and no line at all for line 1. A tab that
// breaks the indentation of line 3 read "yaml: line 2: found a tab
// character that violates indentation". That line is a lower bound, though,
// and yaml reads a stream: the file's first n lines give the same error
// once they reach the problem, and not before. So the line reported is the
// smallest such n, found by bisection (each try a parse of at most data). A
// construct never closed (a flow mapping, a quote) is reported on the line
// it opens: cut there, the file gives the same error.
func syntaxError(data []byte, err error) error {
	msg := err.Error()
	problem, ok := strings.CutPrefix(msg, "yaml: ")
	if !ok {
		return &FieldError{Msg: "invalid YAML: " + msg}
	}
	lo := 1 // yaml's line, if it gives one: never past the problem's
	if head, rest, ok := strings.Cut(problem, ": "); ok {
		if n, ok := strings.CutPrefix(head, "line "); ok {
			if l, err := strconv.Atoi(n); err == nil {
				lo, problem = max(l, 1), rest
			}
		}
	}
	ends := lineEnds(data)
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	hi := len(ends) // the whole file gives err
	lo = min(lo, hi)
	for lo < hi {
		mid := lo + (hi-lo)/2
		if _, _, e := documents(data[:ends[mid-1]]); e != nil && e.Error() == msg {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return &FieldError{Line: hi, Msg: "invalid YAML: " + problem}
}

// lineEnds returns the end of each line break in data, the break
// included: the lines yaml numbers, and so the lines every FieldError
// names. YAML 1.1, which yaml.v3 reads, ends a line at CR LF, LF, CR, NEL
// (U+0085), LS (U+2028) or PS (U+2029); counting LF alone put a syntax
// error in a file of CR line ends on its line 1, and let a node's line
// run past the file's last.
func lineEnds(data []byte) []int {
	var ends []int
	for i := 0; i < len(data); i++ {
		switch b := data[i]; {
		case b == '\r' && i+1 < len(data) && data[i+1] == '\n':
			i++
			ends = append(ends, i+1)
		case b == '\n' || b == '\r':
			ends = append(ends, i+1)
		case b == 0xC2 && i+1 < len(data) && data[i+1] == 0x85:
			i++
			ends = append(ends, i+1)
		case b == 0xE2 && i+2 < len(data) && data[i+1] == 0x80 && (data[i+2] == 0xA8 || data[i+2] == 0xA9):
			i += 2
			ends = append(ends, i+1)
		}
	}
	return ends
}
