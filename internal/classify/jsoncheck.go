package classify

import (
	"bytes"
	"strconv"
	"sync"
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
func CheckJSON(b []byte) error { return CheckJSONFields(b, nil, nil) }

// checkers pools CheckJSON's state. It is kept off the goroutine stack on
// purpose: its explicit stacks take about 3 KiB, and on the request path a
// frame that size grows every handler goroutine from 8 to 16 KiB, which a
// request then keeps for as long as it waits in the queue.
var checkers = sync.Pool{New: func() any { return new(checker) }}

// reset readies c for b, keeping what its slices have grown up to a bound
// (keepArena bytes, keepKeys keys): one odd body must not leave a pooled
// checker holding its size for good.
func (c *checker) reset(b []byte) {
	// The frames still open (a body refused midway) may hold key sets
	// (maps); those above depth are zero already (pop clears each), so
	// clearing the whole 1.5 KiB array, twice per body, would be spent.
	clear(c.stack[:c.depth])
	c.b, c.i, c.depth = b, 0, 0
	if c.fields.n > 0 {
		c.fields = fieldWatch{}
	}
	c.keys.truncate(0)
	c.arena = c.arena[:0]
	if cap(c.arena) > keepArena {
		c.arena = nil
	}
	if cap(c.keys.more) > keepKeys {
		c.keys.more = nil
	}
}

// What a pooled checker keeps at most of its arena and of its keys beyond
// the in-place array.
const (
	keepArena = 64 << 10
	keepKeys  = 4096
)

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
	// fields locates top-level values for CheckJSONFields; with no key
	// asked for (CheckJSON) it costs a comparison per key and per closing.
	fields fieldWatch
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
		if ch == '-' || ch >= '0' && ch <= '9' { // scanNumber refuses -Infinity
			end, err := scanNumber(c.b, c.i)
			c.i = end
			return false, err
		}
		if bytes.HasPrefix(c.b[c.i:], []byte("NaN")) || bytes.HasPrefix(c.b[c.i:], []byte("Infinity")) {
			return false, c.syntax("NaN and Infinity are not JSON numbers")
		}
		return false, c.syntax("invalid character " + strconv.QuoteRune(rune(ch)) + " where a value was expected")
	}
}

// valueEnd consumes the closers and the comma after a value. It reports
// whether another value is due; false means the top-level object is complete.
func (c *checker) valueEnd() (bool, error) {
	for c.depth > 0 {
		if c.fields.open > 0 && c.depth == 1 {
			c.valueDone()
		}
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// skipSpace returns the index of the first non-whitespace byte at or after i.
// Most calls find a token at once: one comparison tells it from the four
// whitespace bytes, all below '!'.
func skipSpace(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}
