package classify

// Reader walks a JSON document that CheckJSON accepted, the way
// classification reads request bodies and without allocating, for other
// readers of outside JSON (package usage reads the pods' responses with it).
// Every access is bounds-checked, so on other input it stops early instead of
// panicking. Create one with NewReader; it is not safe for concurrent use.
type Reader struct{ r reader }

// NewReader returns a Reader at the start of doc.
func NewReader(doc []byte) *Reader { return &Reader{r: reader{b: doc}} }

// Peek skips spaces and returns the next byte, 0 at the end.
func (r *Reader) Peek() byte { return r.r.peek() }

// Next consumes the byte that Peek returns, such as the '{' or '[' that opens
// an object or list to walk with More.
func (r *Reader) Next() {
	if r.r.peek() != 0 {
		r.r.i++
	}
}

// More consumes a separating comma and reports whether another element
// follows before close, which it consumes.
func (r *Reader) More(close byte) bool { return r.r.more(close) }

// Key reads `"key":` and returns the decoded key, which may live in buf and
// is valid until the next call.
func (r *Reader) Key(buf *[64]byte) []byte { return r.r.key(buf) }

// Skip consumes one value of any type.
func (r *Reader) Skip() { r.r.skip() }

// Int reads an integer literal of at least minValue, or null (reported as not
// set). Fractions, exponents and numeric strings are refused with an *Error
// naming param.
func (r *Reader) Int(param string, minValue int64) (v int64, set bool, err error) {
	return r.r.intValue(param, minValue)
}
