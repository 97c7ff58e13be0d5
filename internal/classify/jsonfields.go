package classify

// maxFields is how many top-level keys CheckJSONFields can locate at once.
const maxFields = 4

// Span locates one value in a document: doc[Start:End], End 0 when the key
// is absent (a value is never empty).
type Span struct{ Start, End int }

// fieldWatch is what a checker records, during its one pass, of the values
// of the top-level keys it was asked for. Its zero value watches none.
type fieldWatch struct {
	want  [maxFields]string
	n     int // keys in want
	found [maxFields]Span
	open  int // 1 + the index in want of the value being checked, 0 when none
}

// CheckJSONFields is CheckJSON that also locates, in the same pass, the
// values of the top-level keys named in keys: vals[i] is keys[i]'s value,
// which a Reader over doc[vals[i].Start:vals[i].End] walks without a second
// pass over the rest of the document. Keys are compared after unescaping,
// as Reader.Key returns them; CheckJSON refuses a key given twice, so each is
// found at most once. When the document is refused, vals means nothing.
//
// keys holds at most 4 keys and vals at least as many entries as keys; more
// keys, or fewer vals, panic (a programming error). It allocates no more than
// CheckJSON.
func CheckJSONFields(doc []byte, keys []string, vals []Span) error {
	if len(keys) > maxFields || len(vals) < len(keys) {
		panic("classify: CheckJSONFields takes at most 4 keys and a Span for each")
	}
	c := checkers.Get().(*checker)
	c.reset(doc)
	c.fields.n = copy(c.fields.want[:], keys)
	err := c.run()
	copy(vals, c.fields.found[:len(keys)])
	c.reset(nil) // hold no body and no key set while pooled
	checkers.Put(c)
	return err
}

// watchKey notes the top-level key whose value begins at c.i, if it is
// one of those asked for. key is the decoded key.
func (c *checker) watchKey(key []byte) {
	w := &c.fields
	for i := range w.n {
		if string(key) == w.want[i] {
			w.open = i + 1
			w.found[i].Start = c.i
			return
		}
	}
}

// valueDone closes the watched value open at the top level, which ends at
// c.i: valueEnd calls it each time it is back at depth 1.
func (c *checker) valueDone() {
	w := &c.fields
	w.found[w.open-1].End = c.i
	w.open = 0
}
