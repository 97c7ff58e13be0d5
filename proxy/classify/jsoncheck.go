package classify

import (
	"bytes"
	"encoding/binary"
	"math"
	"strconv"
	"unicode/utf8"
)

const (
	// maxJSONDepth bounds the nesting of objects and arrays in a body.
	// OpenAI bodies nest a handful of levels (tool JSON schemas a few more);
	// Python's json recurses and fails near 1000 levels, far past the point
	// where a deep body is a mistake or an attack.
	maxJSONDepth = 64
	// maxNumberLen bounds a number literal. CPython refuses integers of more
	// than 4300 digits (sys.get_int_max_str_digits) where Go's float parser
	// would round them silently.
	maxNumberLen = 4300
	// smallObjectKeys is how many keys an object may have before duplicate
	// detection switches from a linear scan to a map, so that a body with one
	// huge object cannot make the check quadratic.
	smallObjectKeys = 32
)

// CheckJSON refuses bodies that Go and Python (vLLM's json.loads plus
// pydantic) could read differently, so that what gatekeeper estimates is what
// vLLM executes. It accepts exactly RFC 8259 JSON whose top-level value is an
// object, and refuses besides:
//
//   - duplicate keys in any object, compared after unescaping ("a" and
//     "\u0061" are the same key), since parsers disagree on which one wins;
//   - invalid UTF-8, which Go would replace with U+FFFD and Python rejects;
//   - \u escapes that leave a lone surrogate, which Go replaces and Python
//     keeps as an unpaired code point;
//   - NaN, Infinity and -Infinity, which Python accepts and Go does not;
//   - numbers that overflow a float64 (Python: inf) or longer than
//     maxNumberLen bytes (Python: ValueError);
//   - nesting deeper than maxJSONDepth, a byte-order mark, trailing data.
//
// Keys that differ only in case from a field gatekeeper reads are refused by
// classify, which knows where those fields live. The error is a
// *Error. CheckJSON allocates only for a key with escapes, an
// object of more than smallObjectKeys keys, more than 64 keys open at once,
// or a number with an exponent; ordinary bodies cost no allocation.
func CheckJSON(b []byte) error {
	c := checker{b: b}
	return c.run()
}

// keySpan locates one decoded key: in the body, or in the arena when the key
// held escapes.
type keySpan struct {
	off, end int
	arena    bool
}

// frame is one open object or array.
type frame struct {
	object   bool
	keyStart int                 // index into checker.keys of this object's first key
	set      map[string]struct{} // keys once the object outgrew smallObjectKeys
}

// checker is CheckJSON's state: an iterative parser with an explicit stack,
// so a deep body cannot grow the goroutine stack.
type checker struct {
	b     []byte
	i     int
	depth int
	stack [maxJSONDepth]frame
	keys  keyStack // keys of the open objects, innermost last
	arena []byte   // decoded keys that held escapes
}

// keyStack is a stack of keys that lives in place up to its array's size,
// so that CheckJSON does not allocate for ordinary bodies. (A slice pointing
// into the checker itself would move the whole checker to the heap.)
type keyStack struct {
	arr  [64]keySpan
	more []keySpan // entries past len(arr)
	n    int
}

func (s *keyStack) push(k keySpan) {
	if s.n < len(s.arr) {
		s.arr[s.n] = k
	} else {
		s.more = append(s.more, k)
	}
	s.n++
}

func (s *keyStack) at(i int) keySpan {
	if i < len(s.arr) {
		return s.arr[i]
	}
	return s.more[i-len(s.arr)]
}

func (s *keyStack) truncate(n int) {
	s.n = n
	s.more = s.more[:max(n-len(s.arr), 0)]
}

func (c *checker) run() error {
	c.ws()
	if c.i >= len(c.b) {
		return &Error{Message: "request body is empty; expected a JSON object", Code: codeInvalidJSON}
	}
	if c.b[c.i] != '{' {
		if bytes.HasPrefix(c.b[c.i:], []byte("\xef\xbb\xbf")) {
			return c.syntax("byte-order mark before the JSON object")
		}
		return &Error{Message: "request body must be a JSON object", Code: codeInvalidJSON}
	}
	for {
		more, err := c.valueStart()
		if err != nil {
			return err
		}
		if more {
			continue
		}
		more, err = c.valueEnd()
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	c.ws()
	if c.i != len(c.b) {
		return c.syntax("data after the top-level JSON object")
	}
	return nil
}

// valueStart consumes a scalar, or opens a container. It reports whether a
// container was opened whose first value is now due (the key and colon of an
// object already consumed).
func (c *checker) valueStart() (bool, error) {
	c.ws()
	if c.i >= len(c.b) {
		return false, c.syntax("unexpected end of input")
	}
	switch ch := c.b[c.i]; ch {
	case '{', '[':
		if c.depth == maxJSONDepth {
			return false, &Error{Code: codeInvalidJSON,
				Message: "JSON nests deeper than " + strconv.Itoa(maxJSONDepth) + " levels"}
		}
		c.stack[c.depth] = frame{object: ch == '{', keyStart: c.keys.n}
		c.depth++
		c.i++
		c.ws()
		if c.i < len(c.b) && (c.b[c.i] == '}' && ch == '{' || c.b[c.i] == ']' && ch == '[') {
			c.i++
			c.pop()
			return false, nil
		}
		if ch == '{' {
			return true, c.member()
		}
		return true, nil
	case '"':
		end, _, err := scanString(c.b, c.i)
		c.i = end
		return false, err
	case 't':
		return false, c.literal("true")
	case 'f':
		return false, c.literal("false")
	case 'n':
		return false, c.literal("null")
	default:
		if bytes.HasPrefix(c.b[c.i:], []byte("NaN")) || bytes.HasPrefix(c.b[c.i:], []byte("Infinity")) {
			return false, c.syntax("NaN and Infinity are not JSON numbers")
		}
		if ch == '-' || ch >= '0' && ch <= '9' {
			end, err := scanNumber(c.b, c.i)
			c.i = end
			return false, err
		}
		return false, c.syntax("invalid character " + strconv.QuoteRune(rune(ch)) + " where a value was expected")
	}
}

// valueEnd consumes the closers and the comma after a value. It reports
// whether another value is due; false means the top-level object is complete.
func (c *checker) valueEnd() (bool, error) {
	for c.depth > 0 {
		c.ws()
		if c.i >= len(c.b) {
			return false, c.syntax("unexpected end of input")
		}
		f := &c.stack[c.depth-1]
		switch ch := c.b[c.i]; {
		case ch == ',':
			c.i++
			if f.object {
				c.ws()
				return true, c.member()
			}
			return true, nil
		case ch == '}' && f.object, ch == ']' && !f.object:
			c.i++
			c.pop()
		default:
			return false, c.syntax("expected ',' or a closing bracket")
		}
	}
	return false, nil
}

func (c *checker) pop() {
	c.depth--
	f := &c.stack[c.depth]
	if f.object {
		c.keys.truncate(f.keyStart)
		if c.keys.n == 0 {
			c.arena = c.arena[:0]
		}
	}
	*f = frame{}
}

// member consumes `"key" :` and checks the key against its object's others.
func (c *checker) member() error {
	if c.i >= len(c.b) || c.b[c.i] != '"' {
		return c.syntax("expected a string key")
	}
	start := c.i
	end, escaped, err := scanString(c.b, c.i)
	if err != nil {
		return err
	}
	c.i = end
	span := keySpan{off: start + 1, end: end - 1}
	if escaped {
		off := len(c.arena)
		c.arena = appendUnquoted(c.arena, c.b[start+1:end-1])
		span = keySpan{off: off, end: len(c.arena), arena: true}
	}
	key := c.key(span)
	f := &c.stack[c.depth-1]
	if f.set != nil {
		if _, dup := f.set[string(key)]; dup {
			return duplicateKey(key)
		}
		f.set[string(key)] = struct{}{}
	} else {
		for j := f.keyStart; j < c.keys.n; j++ {
			if bytes.Equal(c.key(c.keys.at(j)), key) {
				return duplicateKey(key)
			}
		}
		c.keys.push(span)
		if c.keys.n-f.keyStart > smallObjectKeys {
			f.set = make(map[string]struct{}, 2*smallObjectKeys)
			for j := f.keyStart; j < c.keys.n; j++ {
				f.set[string(c.key(c.keys.at(j)))] = struct{}{}
			}
			c.keys.truncate(f.keyStart)
		}
	}
	c.ws()
	if c.i >= len(c.b) || c.b[c.i] != ':' {
		return c.syntax("expected ':' after an object key")
	}
	c.i++
	return nil
}

func (c *checker) key(s keySpan) []byte {
	if s.arena {
		return c.arena[s.off:s.end]
	}
	return c.b[s.off:s.end]
}

func (c *checker) literal(word string) error {
	if !bytes.HasPrefix(c.b[c.i:], []byte(word)) {
		return c.syntax("invalid literal; expected " + word)
	}
	c.i += len(word)
	return nil
}

func (c *checker) ws() { c.i = skipSpace(c.b, c.i) }

func (c *checker) syntax(msg string) error { return syntaxError(c.i, msg) }

func syntaxError(off int, msg string) error {
	return &Error{Code: codeInvalidJSON,
		Message: "invalid JSON at byte " + strconv.Itoa(off) + ": " + msg}
}

func duplicateKey(key []byte) error {
	return &Error{Code: codeInvalidJSON,
		Message: "duplicate key " + strconv.Quote(truncate(string(key), 64)) + " in a JSON object"}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// skipSpace returns the index of the first non-whitespace byte at or after i.
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanString validates the string literal whose opening quote is at b[i] and
// returns the index after its closing quote and whether it holds escapes.
func scanString(b []byte, i int) (end int, escaped bool, err error) {
	start := i
	i++
	for i < len(b) {
		for i+8 <= len(b) && !special8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			break
		}
		ch := b[i]
		if plainStringByte[ch] {
			i++
			continue
		}
		switch {
		case ch == '"':
			return i + 1, escaped, nil
		case ch == '\\':
			escaped = true
			n, err := scanEscape(b, i)
			if err != nil {
				return i, true, err
			}
			i = n
		case ch < 0x20:
			return i, escaped, syntaxError(i, "control character in a string; escape it")
		case ch < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return i, escaped, &Error{Code: codeInvalidJSON,
					Message: "invalid UTF-8 at byte " + strconv.Itoa(i)}
			}
			i += size
		}
	}
	return i, escaped, syntaxError(start, "unterminated string")
}

// plainStringByte marks the bytes that stand for themselves inside a string:
// printable ASCII but the quote and the backslash.
var plainStringByte = func() (t [256]bool) {
	for ch := 0x20; ch < utf8.RuneSelf; ch++ {
		t[ch] = ch != '"' && ch != '\\'
	}
	return t
}()

// special8 reports whether any of the eight bytes in x is not a plainStringByte
// (a word at a time: ASCII text is most of a body). It may report true for a
// plain byte only when a special one precedes it, which is harmless here.
func special8(x uint64) bool {
	const lsb, msb = 0x0101010101010101, 0x8080808080808080
	zero := func(v uint64) uint64 { return (v - lsb) &^ v & msb }
	return (x-0x20*lsb)&^x&msb|zero(x^'"'*lsb)|zero(x^'\\'*lsb)|x&msb != 0
}

// scanEscape validates the escape sequence at b[i] == '\\' and returns the
// index after it. A \u escape of a high surrogate must be followed by one of
// a low surrogate.
func scanEscape(b []byte, i int) (int, error) {
	if i+1 >= len(b) {
		return i, syntaxError(i, "unterminated string")
	}
	switch b[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 2, nil
	case 'u':
		r, ok := hex4(b, i+2)
		if !ok {
			return i, syntaxError(i, `invalid \u escape`)
		}
		switch {
		case r >= 0xDC00 && r < 0xE000:
			return i, syntaxError(i, "lone low surrogate in a \\u escape")
		case r >= 0xD800 && r < 0xDC00:
			lo, ok := uint32(0), i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u'
			if ok {
				lo, ok = hex4(b, i+8)
			}
			if !ok || lo < 0xDC00 || lo >= 0xE000 {
				return i, syntaxError(i, "lone high surrogate in a \\u escape")
			}
			return i + 12, nil
		}
		return i + 6, nil
	default:
		return i, syntaxError(i, "invalid escape character")
	}
}

func hex4(b []byte, i int) (uint32, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r uint32
	for _, ch := range b[i : i+4] {
		switch {
		case ch >= '0' && ch <= '9':
			ch -= '0'
		case ch >= 'a' && ch <= 'f':
			ch -= 'a' - 10
		case ch >= 'A' && ch <= 'F':
			ch -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | uint32(ch)
	}
	return r, true
}

// scanNumber validates the number literal at b[i] and returns the index after
// it: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, within float64 range.
func scanNumber(b []byte, i int) (int, error) {
	start := i
	if b[i] == '-' {
		i++
		if i < len(b) && b[i] == 'I' {
			return i, syntaxError(start, "NaN and Infinity are not JSON numbers")
		}
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return i, syntaxError(i, "invalid number")
	}
	intDigits, exponent := i-start, false
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return j, syntaxError(j, "invalid number: digits expected after '.'")
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		exponent = true
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return j, syntaxError(j, "invalid number: digits expected in the exponent")
		}
		i = j
	}
	if i-start > maxNumberLen {
		return i, syntaxError(start, "number literal longer than "+strconv.Itoa(maxNumberLen)+" characters")
	}
	if exponent || i-start > intDigits && intDigits > 300 {
		// Python reads a float that overflows as inf; Go refuses it. Only
		// an exponent or a long integer part can overflow, so plain
		// numbers such as 0.7 skip the parse and its allocation.
		f, err := strconv.ParseFloat(string(b[start:i]), 64)
		if err != nil && math.IsInf(f, 0) {
			return i, syntaxError(start, "number out of the float64 range")
		}
	}
	return i, nil
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// appendUnquoted appends the decoded form of raw, the inside of a string
// literal that scanString accepted.
func appendUnquoted(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		ch := raw[i]
		if ch != '\\' || i+1 >= len(raw) {
			dst = append(dst, ch)
			i++
			continue
		}
		switch raw[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, n := decodeU(raw, i)
			dst = utf8.AppendRune(dst, r)
			i += n
			continue
		default: // '"', '\\', '/'
			dst = append(dst, raw[i+1])
		}
		i += 2
	}
	return dst
}

// decodeU decodes the \u escape (or surrogate pair) at raw[i] and returns the
// rune and the bytes consumed. Invalid input decodes to U+FFFD.
func decodeU(raw []byte, i int) (rune, int) {
	r, ok := hex4(raw, i+2)
	if !ok {
		return utf8.RuneError, 2
	}
	if r >= 0xD800 && r < 0xDC00 && i+11 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
		if lo, ok := hex4(raw, i+8); ok && lo >= 0xDC00 && lo < 0xE000 {
			return rune((r-0xD800)<<10|(lo-0xDC00)) + 0x10000, 12
		}
	}
	if r >= 0xD800 && r < 0xE000 {
		return utf8.RuneError, 6
	}
	return rune(r), 6
}
