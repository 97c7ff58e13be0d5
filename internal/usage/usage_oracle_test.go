package usage

import (
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/classify"
)

// The two-pass reading that parseUsage replaced, kept as the oracle its
// tests compare it with: classify.CheckJSON over the whole document, then a
// walk from its start to the top-level "usage" (and "response").

// parseUsageTwoPass is parseUsage as two passes.
func parseUsageTwoPass(doc []byte) (Tokens, bool) {
	if classify.CheckJSON(doc) != nil {
		return Tokens{}, false
	}
	r := classify.NewReader(doc)
	r.Next() // the '{' that CheckJSON guarantees
	return findUsageTwoPass(r, true)
}

// findUsageTwoPass reads the object r is inside for its "usage" key; at the
// top level (top) it reads a "response" object's too.
func findUsageTwoPass(r *classify.Reader, top bool) (Tokens, bool) {
	var buf [64]byte
	var own, nested Tokens
	for r.More('}') {
		switch k := string(r.Key(&buf)); {
		case k == "usage":
			u, ok := readUsage(r)
			if !ok {
				return Tokens{}, false
			}
			own = u
		case top && k == "response" && r.Peek() == '{':
			r.Next()
			u, ok := findUsageTwoPass(r, false)
			if !ok {
				return Tokens{}, false
			}
			nested = u
		default:
			r.Skip()
		}
	}
	if own.Known {
		return own, true
	}
	return nested, true
}

// hasTopLevelKey reports whether doc is a JSON object that CheckJSON accepts
// with the key at its top level, in two passes.
func hasTopLevelKey(doc []byte, key string) bool {
	return classify.CheckJSON(doc) == nil && classify.HasTopLevelKey(doc, key)
}

// FuzzReadDoc: for any document, the one-pass readDoc gives the usage and
// the top-level "error" that the two-pass oracle gives.
func FuzzReadDoc(f *testing.F) {
	for _, tt := range usageCases {
		f.Add([]byte(tt.body))
	}
	for _, s := range oneTwoPassCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgainstTwoPass(t, data)
	})
}

func checkAgainstTwoPass(t *testing.T, data []byte) {
	t.Helper()
	d := readDoc(data)
	u, ok := d.usage()
	if wu, wok := parseUsageTwoPass(data); u != wu || ok != wok {
		t.Fatalf("readDoc(%q).usage() = %v, %v; two passes give %v, %v", data, u, ok, wu, wok)
	}
	hasError := d.has(fieldError)
	if want := hasTopLevelKey(data, "error"); hasError != want {
		t.Fatalf("readDoc(%q) has a top-level error: %v; two passes say %v", data, hasError, want)
	}
}

// oneTwoPassCases are documents where a one-pass reading could go wrong:
// the keys spelt with escapes, nested where only the top level counts,
// repeated, malformed after the usage, null, empty, and beside a
// "response" whose usage wins or loses.
var oneTwoPassCases = []string{
	`{"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
	` { "usage" : { "prompt_tokens" : 1 , "completion_tokens" : 2 } , "x" : 1 } `,
	`{"\u0075sage":{"prompt_tokens":1,"completion_tokens":2},"s":"\"usage\""}`,
	`{"a":{"usage":{"prompt_tokens":1}},"usage":null}`,
	`{"a":[{"usage":{"prompt_tokens":1}}],"b":"usage"}`,
	`{"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":2}}`,
	`{"usage":{"prompt_tokens":1,"completion_tokens":2},"x":[1,2,}`,
	`{"usage":{"prompt_tokens":1,"completion_tokens":2}}x`,
	`{"usage":{"prompt_tokens":1,"prompt_tokens":2}}`,
	`{"usage":{"prompt_tokens":1,"input_tokens":2}}`,
	`{"usage":{"prompt_tokens":-1}}`,
	`{"usage":{"prompt_tokens":1.5}}`,
	`{"usage":{}}`,
	`{"usage":[]}`,
	`{"usage":"x"}`,
	`{"usage":null,"response":{"usage":{"input_tokens":4,"output_tokens":5}}}`,
	`{"usage":{"prompt_tokens":1},"response":{"usage":{"input_tokens":4}}}`,
	`{"usage":{"prompt_tokens":1},"response":{"usage":{"input_tokens":-4}}}`,
	`{"response":{"usage":null,"x":{"usage":{"input_tokens":4}}}}`,
	`{"response":[{"usage":{"input_tokens":4}}]}`,
	`{"response":"usage"}`,
	`{"error":{"message":"boom"},"usage":null}`,
	`{"\u0065rror":1}`,
	`{"x":{"error":1}}`,
	`{"error":1,"error":2}`,
	`{"error":1}{`,
	`{"usage":{"prompt_tokens":1}}` + "\xef\xbb\xbf",
	"{\"usage\":{\"prompt_tokens\":1},\"s\":\"\xff\"}",
	`{"usage":{"prompt_tokens":1},"n":1e400}`,
}

// TestReadDocAgreesWithTwoPass runs the fuzz seeds as a plain test.
func TestReadDocAgreesWithTwoPass(t *testing.T) {
	for _, s := range oneTwoPassCases {
		checkAgainstTwoPass(t, []byte(s))
	}
	for _, tt := range usageCases {
		checkAgainstTwoPass(t, []byte(tt.body))
	}
}
