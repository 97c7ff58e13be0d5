package classify

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzClassify feeds arbitrary bodies to every route. Properties: classify
// never panics or hangs, even on bodies CheckJSON would refuse; every error is
// a *Error; an accepted body is valid JSON to encoding/json and has
// an estimate of at least 1; and re-encoding an accepted body with
// encoding/json (other escapes, spacing and key order) changes nothing,
// the prompt's text for prefix blocks (PromptText) included.
func FuzzClassify(f *testing.F) {
	for _, tt := range classifyCases {
		f.Add(routeIndex(tt.path), []byte(tt.body))
	}
	f.Add(uint8(2), []byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"\ud83d\ude00"}]}],"tools":[{"a":{"b":[1,2.5,null]}}]}`))
	f.Add(uint8(1), []byte(`{"prompt":[[1,2],[3]],"n":2,"best_of":3,"max_tokens":0}`))
	f.Add(uint8(1), []byte(`{"prompt":"x","priorit\u0079":-1,"extra":{"priority":2}}`))
	f.Fuzz(func(t *testing.T, idx uint8, body []byte) {
		kind := testRoutes[int(idx)%len(testRoutes)].kind
		_, _ = classify(kind, body, testEstimator) // unchecked input: no panic, no hang
		_ = PromptText(kind, body, nil, 256)
		c, err := Parse(kind, body, testEstimator)
		if err != nil {
			var bre *Error
			if !errors.As(err, &bre) {
				t.Fatalf("Parse error %v is not a *Error", err)
			}
			return
		}
		if !kind.JSON() {
			return
		}
		if c.HasPriority != HasTopLevelKey(body, "priority") {
			t.Fatalf("Parse(%q).HasPriority = %v; a second pass for the top-level key says otherwise", body, c.HasPriority)
		}
		if !json.Valid(body) {
			t.Fatalf("Parse accepted %q, which encoding/json rejects", body)
		}
		if c.Estimated < 1 {
			t.Fatalf("Parse(%q).Estimated = %d, want at least 1", body, c.Estimated)
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("encoding/json cannot decode accepted %q: %v", body, err)
		}
		again, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("json.Marshal: %v", err)
		}
		c2, err := Parse(kind, again, testEstimator)
		if err != nil || c2 != c {
			t.Fatalf("re-encoded body classifies differently:\n%s → %+v\n%s → %+v, %v", body, c, again, c2, err)
		}
		// The prompt's text is the same however the body is written.
		if p1, p2 := PromptText(kind, body, nil, 256), PromptText(kind, again, nil, 256); !bytes.Equal(p1, p2) || len(p1) > 256 {
			t.Fatalf("PromptText differs for a re-encoded body or passes its limit:\n%s → %q\n%s → %q", body, p1, again, p2)
		}
	})
}

// FuzzCheckJSON: whatever CheckJSON accepts, encoding/json accepts too, as
// an object whose numbers other than integers fit a float64; CheckJSONFields gives CheckJSON's verdict and the values that a
// second pass with a Reader finds.
func FuzzCheckJSON(f *testing.F) {
	for _, tt := range classifyCases {
		f.Add([]byte(tt.body))
	}
	for _, s := range []string{`{}`, `{"a":1,"a":2}`, `{"s":"\ud800"}`, `{"t":NaN}`, `{"n":1e400}`, "{\"s\":\"\xff\"}", `{"a":[[[[]]]]}`} {
		f.Add([]byte(s))
	}
	for _, s := range fieldsCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkFields(t, body)
		if err := CheckJSON(body); err != nil {
			return
		}
		// Numbers as json.Number: an integer longer than a float64 holds is
		// accepted on purpose (Python reads it exactly; see "long integer"
		// in TestCheckJSON); any other number must fit a float64.
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil || dec.More() {
			t.Fatalf("CheckJSON accepted %q, which encoding/json rejects: %v", body, err)
		}
		if n, ok := badFloat(m); !ok {
			t.Fatalf("CheckJSON accepted %q, whose number %s overflows a float64", body, n)
		}
	})
}

// badFloat finds a number in v, decoded with UseNumber, that has a fraction
// or an exponent and does not fit a float64; ok is false when there is one.
func badFloat(v any) (json.Number, bool) {
	switch v := v.(type) {
	case json.Number:
		if bytes.ContainsAny([]byte(v), ".eE") {
			if _, err := v.Float64(); err != nil {
				return v, false
			}
		}
	case map[string]any:
		for _, e := range v {
			if n, ok := badFloat(e); !ok {
				return n, false
			}
		}
	case []any:
		for _, e := range v {
			if n, ok := badFloat(e); !ok {
				return n, false
			}
		}
	}
	return "", true
}

// routeIndex returns the index of path in testRoutes, as FuzzClassify
// selects it.
func routeIndex(path string) uint8 {
	for i, rt := range testRoutes {
		if rt.path == path {
			return uint8(i)
		}
	}
	return 0
}
