package classify

import (
	"strings"
	"testing"
)

// fieldsKeys are the keys the tests ask CheckJSONFields for.
var fieldsKeys = []string{"usage", "response", "error", "a"}

// fieldsCases are bodies where locating a top-level value in the checking
// pass could go wrong: escaped, nested, repeated and empty keys; values of
// every type, empty containers, spaces around them; bodies refused after the
// value.
var fieldsCases = []string{
	`{"usage":{"prompt_tokens":1}}`,
	` { "usage" : { "p" : [ 1 , { } ] } , "a" : 1 } `,
	`{"\u0075sage":2,"s":"\"usage\":3"}`,
	`{"x":{"usage":1,"a":{"a":2}},"a":[]}`,
	`{"a":{},"usage":[],"response":"r","error":null}`,
	`{"a":true,"usage":false,"response":-1.5e3,"error":"\ud83d\ude00"}`,
	`{"a":1,"a":2}`,
	`{"usage":1,"x":[1,}`,
	`{"usage":1}}`,
	`{"usage":"` + strings.Repeat("u", 100) + `"}`,
	`{"":1,"a":{"":{"usage":0}}}`,
	`{"e":0,"f":1,"g":2,"h":3,"i":4,"j":5,"k":6,"l":7,"m":8,"n":9,"o":10,"p":11,"q":12,"r":13,"s":14,` +
		`"t":15,"u":16,"v":17,"w":18,"x":19,"y":20,"z":21,"A":22,"B":23,"C":24,"D":25,"E":26,"F":27,` +
		`"G":28,"H":29,"I":30,"J":31,"K":32,"L":33,"usage":{"deep":[[[]]]},"a":"end"}`,
}

// TestCheckJSONFields runs the cases and the classification table through
// checkFields.
func TestCheckJSONFields(t *testing.T) {
	for _, s := range fieldsCases {
		checkFields(t, []byte(s))
	}
	for _, tt := range classifyCases {
		checkFields(t, []byte(tt.body))
	}
	var vals [1]Span
	if err := CheckJSONFields([]byte(`{"x":1, "usage" :  {"a":[1]} }`), []string{"usage"}, vals[:]); err != nil ||
		vals[0] != (Span{Start: 19, End: 28}) {
		t.Fatalf("CheckJSONFields = %v, %v; want {19 28}, nil", vals[0], err)
	}
}

// TestCheckJSONFieldsAllocs: locating values allocates nothing more than
// the check.
func TestCheckJSONFieldsAllocs(t *testing.T) {
	body := []byte(`{"id":"x","choices":[{"text":" hi"}],"usage":{"prompt_tokens":5,"completion_tokens":1}}`)
	var vals [4]Span
	if n := testing.AllocsPerRun(100, func() { _ = CheckJSONFields(body, fieldsKeys, vals[:]) }); n != 0 {
		t.Fatalf("CheckJSONFields allocates %v times per run, want 0", n)
	}
}

// checkFields asks CheckJSONFields for fieldsKeys in body: its error must
// be CheckJSON's, and on an accepted body each value must be the one that a
// second pass, walking the top level with a Reader, finds.
func checkFields(t *testing.T, body []byte) {
	t.Helper()
	var vals [4]Span
	err := CheckJSONFields(body, fieldsKeys, vals[:])
	want := CheckJSON(body)
	if (err == nil) != (want == nil) || err != nil && err.Error() != want.Error() {
		t.Fatalf("CheckJSONFields(%q) = %v, CheckJSON %v", body, err, want)
	}
	if err != nil {
		return
	}
	for i, k := range fieldsKeys {
		if got, want := vals[i], topValue(body, k); got != want {
			t.Fatalf("CheckJSONFields(%q) locates %q at %v, a Reader at %v", body, k, got, want)
		}
	}
}

// topValue walks body's top level with a Reader for key's value.
func topValue(body []byte, key string) Span {
	r := NewReader(body)
	r.Next()
	var buf [64]byte
	for r.More('}') {
		k := string(r.Key(&buf))
		r.Peek()
		start := r.r.i
		r.Skip()
		if k == key {
			return Span{Start: start, End: r.r.i}
		}
	}
	return Span{}
}
