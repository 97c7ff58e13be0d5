package classify

import (
	"bytes"
	"strconv"
)

// keySpan locates one decoded key: in the body, or in the arena when the key
// held escapes.
type keySpan struct {
	off, end int
	arena    bool
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
			if s := c.keys.at(j); s.end-s.off == len(key) && bytes.Equal(c.key(s), key) {
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
	c.i = skipSpace(c.b, c.i+1)
	if c.fields.n > 0 && c.depth == 1 {
		c.watchKey(key)
	}
	return nil
}

func (c *checker) key(s keySpan) []byte {
	if s.arena {
		return c.arena[s.off:s.end]
	}
	return c.b[s.off:s.end]
}

func duplicateKey(key []byte) error {
	return &Error{Code: codeInvalidJSON,
		Message: "duplicate key " + strconv.Quote(truncate(string(key), 64)) + " in a JSON object"}
}
