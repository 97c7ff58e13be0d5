package classify

import (
	"bytes"
	"strconv"
	"unicode/utf8"
)

// reader walks a body that CheckJSON accepted. Every access is bounds-checked,
// so on other input it stops early instead of panicking.
type reader struct {
	b []byte
	i int
}

// peek skips spaces and returns the next byte, 0 at the end.
func (r *reader) peek() byte {
	if r.i = skipSpace(r.b, r.i); r.i < len(r.b) {
		return r.b[r.i]
	}
	return 0
}

// more consumes a separating comma and reports whether another element
// follows before close, which it consumes.
func (r *reader) more(close byte) bool {
	ch := r.peek()
	if ch == ',' {
		r.i++
		ch = r.peek()
	}
	if ch == close {
		r.i++
		return false
	}
	return ch != 0 && ch != '}' && ch != ']'
}

// key reads `"key":` and returns the decoded key, which may live in buf and
// is valid until the next call.
func (r *reader) key(buf *[64]byte) []byte {
	raw := r.rawString()
	if bytes.IndexByte(raw, '\\') >= 0 {
		raw = appendUnquoted(buf[:0], raw)
	}
	if r.peek() == ':' {
		r.i++
	}
	return raw
}

// rawString consumes a string literal and returns its inside, undecoded.
// At anything but a string it consumes nothing and returns nil.
func (r *reader) rawString() []byte {
	if r.peek() != '"' {
		return nil
	}
	start := r.i + 1
	end := stringEnd(r.b, r.i)
	r.i = end
	return r.b[start:max(end-1, start)]
}

// stringEnd returns the index after the string literal starting at b[i].
func stringEnd(b []byte, i int) int {
	i++
	for i < len(b) {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		// The quote ends the string unless an odd run of backslashes escapes it.
		k := i + j
		bs := 0
		for k-1-bs >= i && b[k-1-bs] == '\\' {
			bs++
		}
		if bs%2 == 0 {
			return k + 1
		}
		i = k + 1
	}
	return len(b)
}

// text consumes a string and returns the length of its decoded UTF-8 and
// whether it is a data: URL.
func (r *reader) text() (n int64, data bool) {
	raw := r.rawString()
	data = isDataURL(raw)
	if bytes.IndexByte(raw, '\\') < 0 {
		return int64(len(raw)), data
	}
	for i := 0; i < len(raw); {
		switch {
		case raw[i] != '\\' || i+1 >= len(raw):
			n++
			i++
		case raw[i+1] == 'u':
			ru, k := decodeU(raw, i)
			n += int64(utf8.RuneLen(ru))
			i += k
		default:
			n++
			i += 2
		}
	}
	return n, data
}

// isDataURL reports whether the string literal's inside raw decodes to a
// value starting with "data:".
func isDataURL(raw []byte) bool {
	const prefix = "data:"
	if bytes.HasPrefix(raw, []byte(prefix)) {
		return true
	}
	head := raw[:min(len(raw), 6*len(prefix))] // enough for the prefix spelt in \u escapes
	if bytes.IndexByte(head, '\\') < 0 {
		return false
	}
	var buf [6 * len(prefix)]byte
	return bytes.HasPrefix(appendUnquoted(buf[:0], head), []byte(prefix))
}

// skip consumes one value of any type.
func (r *reader) skip() {
	switch r.peek() {
	case '"':
		r.i = stringEnd(r.b, r.i)
	case '{', '[':
		depth := 0
		for r.i < len(r.b) {
			switch r.b[r.i] {
			case '"':
				r.i = stringEnd(r.b, r.i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			r.i++
			if depth == 0 {
				return
			}
		}
	default:
		for r.i < len(r.b) {
			switch r.b[r.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return
			}
			r.i++
		}
	}
}

// stringValue reads a string or null ("").
func (r *reader) stringValue(param string) (string, error) {
	switch r.peek() {
	case 'n':
		r.skip()
		return "", nil
	case '"':
		raw := r.rawString()
		if bytes.IndexByte(raw, '\\') >= 0 {
			var buf [64]byte
			return string(appendUnquoted(buf[:0], raw)), nil
		}
		return string(raw), nil
	}
	return "", &Error{Param: param, Message: "must be a string", Code: codeInvalidType}
}

// boolValue reads true, false or null (false). Python's pydantic would take
// "true", 1 and more for true; gatekeeper refuses them rather than guess.
func (r *reader) boolValue(param string) (bool, error) {
	switch r.peek() {
	case 't':
		r.skip()
		return true, nil
	case 'f', 'n':
		r.skip()
		return false, nil
	}
	return false, &Error{Param: param, Message: "must be a boolean", Code: codeInvalidType}
}

// intValue reads an integer literal of at least minValue, or null (reported
// as not set). Fractions, exponents and numeric strings are refused, though
// pydantic would coerce some of them.
func (r *reader) intValue(param string, minValue int64) (int64, bool, error) {
	ch := r.peek()
	if ch == 'n' {
		r.skip()
		return 0, false, nil
	}
	if ch != '-' && (ch < '0' || ch > '9') {
		return 0, false, &Error{Param: param, Message: "must be an integer", Code: codeInvalidType}
	}
	start := r.i
	r.skip()
	v, err := strconv.ParseInt(string(r.b[start:r.i]), 10, 64)
	switch {
	case err != nil && bytes.ContainsAny(r.b[start:r.i], ".eE"):
		return 0, false, &Error{Param: param, Message: "must be an integer", Code: codeInvalidType}
	case err != nil:
		return 0, false, &Error{Param: param, Message: "integer out of range", Code: codeInvalidValue}
	case v < minValue:
		return 0, false, &Error{Param: param, Code: codeInvalidValue,
			Message: "must be at least " + strconv.FormatInt(minValue, 10)}
	}
	return v, true, nil
}

// tokenID reads element i of a token id list: a non-negative integer.
func (r *reader) tokenID(name string, i int) (int64, error) {
	ch := r.peek()
	if ch == '-' || ch >= '0' && ch <= '9' {
		v, _, err := r.intValue("", 0)
		if err == nil {
			return v, nil
		}
	}
	return 0, &Error{Param: indexed(name, i), Code: codeInvalidValue,
		Message: "token ids must be non-negative integers"}
}

// HasTopLevelKey reports whether doc, a JSON document that passed
// CheckJSON, is an object with key at its top level.
func HasTopLevelKey(doc []byte, key string) bool {
	r := NewReader(doc)
	if r.Peek() != '{' {
		return false
	}
	r.Next()
	var buf [64]byte
	for r.More('}') {
		if string(r.Key(&buf)) == key {
			return true
		}
		r.Skip()
	}
	return false
}
