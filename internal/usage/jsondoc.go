package usage

import "github.com/gatekeeper-dev/gatekeeper/internal/classify"

// The top-level keys that readDoc locates, in docFields order.
const (
	fieldUsage = iota
	fieldResponse
	fieldError
)

var docFields = [...]string{"usage", "response", "error"}

// doc is one JSON document read by readDoc: whether it passed
// classify.CheckJSON and where its top-level docFields' values are.
type doc struct {
	b     []byte
	valid bool
	vals  [len(docFields)]classify.Span
}

// readDoc checks b with classify.CheckJSON (it refuses what Go and Python
// could read differently) and, in the same pass, locates its top-level
// "usage", "response" and "error", so that reading the usage walks only the
// usage object rather than the document a second time.
func readDoc(b []byte) doc {
	d := doc{b: b}
	d.valid = classify.CheckJSONFields(b, docFields[:], d.vals[:]) == nil
	return d
}

// has reports whether the document is valid and has docFields[i] at its
// top level.
func (d *doc) has(i int) bool { return d.valid && d.vals[i].End > 0 }

// value returns a Reader over the value of docFields[i], nil when absent.
func (d *doc) value(i int) *classify.Reader {
	if sp := d.vals[i]; sp.End > 0 {
		return classify.NewReader(d.b[sp.Start:sp.End])
	}
	return nil
}

// parseUsage reads the usage object of one JSON document, as package
// classify reads request bodies: checked first, then read without
// allocating. ok is false when the document is malformed or its usage is
// not an object of non-negative integer counts; an absent or null usage is
// ok but not known. Missing or null counts are 0 (embeddings have no
// completions).
func parseUsage(b []byte) (u Tokens, ok bool) {
	d := readDoc(b)
	return d.usage()
}

// usage reads the document's top-level "usage". When that is absent or null
// it takes the usage of a top-level "response" object instead: the Responses
// API's stream events (response.completed) carry it there. Either one
// malformed makes the whole unreadable.
func (d *doc) usage() (Tokens, bool) {
	if !d.valid {
		return Tokens{}, false
	}
	var own, nested Tokens
	if r := d.value(fieldUsage); r != nil {
		u, ok := readUsage(r)
		if !ok {
			return Tokens{}, false
		}
		own = u
	}
	if r := d.value(fieldResponse); r != nil && r.Peek() == '{' {
		r.Next()
		u, ok := findUsage(r)
		if !ok {
			return Tokens{}, false
		}
		nested = u
	}
	if own.Known {
		return own, true
	}
	return nested, true
}

// findUsage reads the object r is inside (a Responses API "response") for
// its "usage" key.
func findUsage(r *classify.Reader) (Tokens, bool) {
	var buf [64]byte
	var u Tokens
	for r.More('}') {
		if string(r.Key(&buf)) != "usage" {
			r.Skip()
			continue
		}
		var ok bool
		if u, ok = readUsage(r); !ok { // the only one: CheckJSON refuses duplicates
			return Tokens{}, false
		}
	}
	return u, true
}

// readUsage reads the value of the "usage" key.
func readUsage(r *classify.Reader) (Tokens, bool) {
	switch r.Peek() {
	case 'n':
		return Tokens{}, true
	case '{':
		r.Next()
	default:
		return Tokens{}, false
	}
	u := Tokens{Known: true}
	var buf [64]byte
	var seen [2]bool // a count named twice (prompt_tokens and input_tokens) is malformed
	for r.More('}') {
		var dst *int64
		var i int
		switch string(r.Key(&buf)) {
		case "prompt_tokens", "input_tokens": // Chat and Completions; the Responses API
			dst, i = &u.Prompt, 0
		case "completion_tokens", "output_tokens":
			dst, i = &u.Completion, 1
		default:
			r.Skip()
			continue
		}
		v, _, err := r.Int("", 0) // counters cannot go down
		if err != nil || seen[i] {
			return Tokens{}, false
		}
		*dst, seen[i] = v, true
	}
	return u, true
}
