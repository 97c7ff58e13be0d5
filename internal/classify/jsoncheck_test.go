package classify

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestCheckJSON(t *testing.T) {
	t.Parallel()
	deep := func(n int) string { return `{"a":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + `}` }
	manyKeys := func(n int, dup bool) string {
		var b strings.Builder
		b.WriteString("{")
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(`"k` + strings.Repeat("x", i) + `":1`)
		}
		if dup {
			b.WriteString(`,"k":2`)
		}
		b.WriteString("}")
		return b.String()
	}
	// nestedKeys builds levels nested objects of width keys each, so that
	// more keys are open at once than keyStack holds in place; dup repeats
	// the first key of the innermost object.
	nestedKeys := func(levels, width int, escaped, dup bool) string {
		var b strings.Builder
		for l := 0; l < levels; l++ {
			b.WriteString("{")
			for k := 0; k < width; k++ {
				if escaped {
					b.WriteString(`"\u006b` + strings.Repeat("x", k) + `":1,`)
				} else {
					b.WriteString(`"k` + strings.Repeat("x", k) + `":1,`)
				}
			}
			if dup && l == levels-1 {
				b.WriteString(`"k":2,`)
			}
			b.WriteString(`"next":`)
		}
		b.WriteString("null")
		b.WriteString(strings.Repeat("}", levels))
		return b.String()
	}
	tests := []struct {
		name, body string
		wantErr    string // "" = accepted; else a substring of the message
	}{
		{"many open keys", nestedKeys(4, 30, false, false), ""},
		{"many open escaped keys", nestedKeys(4, 30, true, false), ""},
		{"duplicate among many open keys", nestedKeys(4, 30, false, true), `duplicate key "k"`},
		{"duplicate among many open escaped keys", nestedKeys(4, 30, true, true), `duplicate key "k"`},
		{"duplicate in nested big objects", nestedKeys(3, 40, false, true), `duplicate key "k"`},
		{"empty object", `{}`, ""},
		{"spaces around", " \t\r\n{ } \n", ""},
		{"chat", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`, ""},
		{"all value types", `{"s":"x","n":-1.5e3,"z":0,"t":true,"f":false,"u":null,"a":[1,[],{}],"o":{"p":{}}}`, ""},
		{"escapes", `{"s":"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"}`, ""},
		{"utf-8 text", `{"s":"héllo 世界 😀"}`, ""},
		{"same key in sibling objects", `{"a":{"k":1},"b":{"k":1},"c":[{"k":1},{"k":2}]}`, ""},
		{"same key at different depths", `{"k":{"k":{"k":1}}}`, ""},
		{"keys differing in case", `{"k":1,"K":2}`, ""},
		{"depth at limit", deep(maxJSONDepth), ""},
		{"many keys", manyKeys(100, false), ""},
		{"small float", `{"t":1e-320}`, ""},
		{"big float in range", `{"t":1.7e308}`, ""},
		{"long integer", `{"n":` + strings.Repeat("9", 400) + `}`, ""},

		{"empty body", ``, "empty"},
		{"only spaces", "  \n", "empty"},
		{"array", `[1,2]`, "must be a JSON object"},
		{"string", `"x"`, "must be a JSON object"},
		{"number", `1`, "must be a JSON object"},
		{"null", `null`, "must be a JSON object"},
		{"byte-order mark", "\xef\xbb\xbf{}", "byte-order mark"},
		{"UTF-16", "\xff\xfe{\x00}\x00", "must be a JSON object"},
		{"trailing data", `{} {}`, "data after"},
		{"trailing garbage", `{}x`, "data after"},
		{"trailing comma object", `{"a":1,}`, "expected a string key"},
		{"trailing comma array", `{"a":[1,]}`, "invalid character"},
		{"missing colon", `{"a" 1}`, "expected ':'"},
		{"missing comma", `{"a":1 "b":2}`, "expected ','"},
		{"unquoted key", `{a:1}`, "expected a string key"},
		{"single quotes", `{'a':1}`, "expected a string key"},
		{"unterminated object", `{"a":1`, "unexpected end"},
		{"unterminated array", `{"a":[1`, "unexpected end"},
		{"unterminated string", `{"a":"x`, "unterminated string"},
		{"mismatched bracket", `{"a":[1}}`, "expected ','"},
		{"comment", `{"a":1 /* c */}`, "expected ','"},
		{"NaN", `{"t":NaN}`, "NaN and Infinity"},
		{"Infinity", `{"t":Infinity}`, "NaN and Infinity"},
		{"minus Infinity", `{"t":-Infinity}`, "NaN and Infinity"},
		{"float overflow", `{"t":1e400}`, "float64 range"},
		{"negative float overflow", `{"t":-2e308}`, "float64 range"},
		{"float overflow without exponent", `{"t":` + strings.Repeat("9", 400) + `.5}`, "float64 range"},
		{"number too long", `{"n":` + strings.Repeat("1", maxNumberLen+1) + `}`, "longer than"},
		{"leading zero", `{"n":01}`, "expected ','"},
		{"plus sign", `{"n":+1}`, "invalid character"},
		{"bare minus", `{"n":-}`, "invalid number"},
		{"dot without digits", `{"n":1.}`, "after '.'"},
		{"leading dot", `{"n":.5}`, "invalid character"},
		{"exponent without digits", `{"n":1e}`, "exponent"},
		{"hex number", `{"n":0x10}`, "expected ','"},
		{"bad literal", `{"t":tru}`, "expected true"},
		{"capital literal", `{"t":True}`, "invalid character"},
		{"python None", `{"t":None}`, "invalid character"},
		{"duplicate key", `{"max_tokens":1,"max_tokens":100000}`, `duplicate key "max_tokens"`},
		{"duplicate nested key", `{"messages":[{"role":"user","role":"system"}]}`, `duplicate key "role"`},
		{"duplicate after escape", `{"max_tokens":1,"max\u005ftokens":2}`, `duplicate key "max_tokens"`},
		{"duplicate both escaped", `{"\u0061":1,"\u0061":2}`, `duplicate key "a"`},
		{"duplicate in big object", manyKeys(100, true), `duplicate key "k"`},
		{"duplicate deep", deep(10)[:len(deep(10))-1] + `,"a":1}`, `duplicate key "a"`},
		{"too deep", deep(maxJSONDepth + 1), "deeper than 64"},
		{"very deep", `{"a":` + strings.Repeat("[", 100000), "deeper than 64"},
		{"invalid UTF-8", "{\"s\":\"\xff\"}", "invalid UTF-8"},
		{"truncated UTF-8", "{\"s\":\"\xe4\xb8\"}", "invalid UTF-8"},
		{"overlong UTF-8", "{\"s\":\"\xc0\xaf\"}", "invalid UTF-8"},
		{"UTF-8 surrogate", "{\"s\":\"\xed\xa0\x80\"}", "invalid UTF-8"},
		{"invalid UTF-8 in key", "{\"\xff\":1}", "invalid UTF-8"},
		{"lone high surrogate", `{"s":"\ud800"}`, "lone high surrogate"},
		{"high surrogate then text", `{"s":"\ud800x"}`, "lone high surrogate"},
		{"two high surrogates", `{"s":"\ud800\ud800"}`, "lone high surrogate"},
		{"lone low surrogate", `{"s":"\udc00"}`, "lone low surrogate"},
		{"high surrogate at end", `{"s":"\ud83d`, "lone high surrogate"},
		{"surrogate in key", `{"\udfff":1}`, "lone low surrogate"},
		{"bad escape", `{"s":"\x"}`, "invalid escape"},
		{"short unicode escape", `{"s":"\u12"}`, `invalid \u escape`},
		{"non-hex unicode escape", `{"s":"\u12g4"}`, `invalid \u escape`},
		{"raw newline in string", "{\"s\":\"a\nb\"}", "control character"},
		{"raw tab in string", "{\"s\":\"a\tb\"}", "control character"},
		{"NUL in string", "{\"s\":\"a\x00b\"}", "control character"},
		{"NUL outside string", "{\x00}", "expected a string key"},
		{"vertical tab as space", "{\v}", "expected a string key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := CheckJSON([]byte(tt.body))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckJSON(%.60q) = %v, want nil", tt.body, err)
				}
				if !json.Valid([]byte(tt.body)) {
					t.Fatalf("CheckJSON(%.60q) accepted what encoding/json rejects", tt.body)
				}
				return
			}
			var bre *Error
			if !errors.As(err, &bre) {
				t.Fatalf("CheckJSON(%.60q) = %v, want a *Error containing %q", tt.body, err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "classify: ") {
				t.Errorf("CheckJSON(%.60q) = %q, want it to contain %q", tt.body, err, tt.wantErr)
			}
			if bre.Code != codeInvalidJSON {
				t.Errorf("CheckJSON(%.60q) code = %q, want %q", tt.body, bre.Code, codeInvalidJSON)
			}
		})
	}
}

func TestAppendUnquoted(t *testing.T) {
	t.Parallel()
	for _, lit := range []string{`""`, `"plain"`, `"\"\\\/\b\f\n\r\t"`, `"\u00e9\u4e16"`, `"\ud83d\ude00x"`, `"\u0000"`, `"héllo"`} {
		var want string
		if err := json.Unmarshal([]byte(lit), &want); err != nil {
			t.Fatalf("json.Unmarshal(%s): %v", lit, err)
		}
		if got := string(appendUnquoted(nil, []byte(lit[1:len(lit)-1]))); got != want {
			t.Errorf("appendUnquoted(%s) = %q, want %q", lit, got, want)
		}
	}
}

// A pooled checker holds no key set once reset: neither after a body
// refused while objects (one with a key set, past smallObjectKeys keys) were
// still open, nor after one checked whole. reset clears only the frames
// still open, so every frame above them must be zero already.
func TestCheckerResetLeavesNoFrame(t *testing.T) {
	var big strings.Builder
	big.WriteString(`{"a":{"b":[{`)
	for i := range smallObjectKeys + 8 {
		fmt.Fprintf(&big, `"k%d":%d,`, i, i)
	}
	refused := big.String() + `"k0":1}]}}` // a duplicate key, three containers open
	whole := big.String() + `"last":1}]}}`
	for _, body := range []string{refused, whole} {
		c := new(checker)
		c.reset([]byte(body))
		err := c.run()
		if (body == whole) != (err == nil) {
			t.Fatalf("run = %v", err)
		}
		c.reset(nil)
		for i, f := range c.stack {
			if f.set != nil || f.object || f.keyStart != 0 {
				t.Fatalf("frame %d after reset = %+v, want zero", i, f)
			}
		}
	}
}

// TestSpecialBits pins specialBits to plainStringByte: the lowest bit set
// marks the first byte that is not plain, and none is set when all are (a
// false positive needs a special byte below it).
func TestSpecialBits(t *testing.T) {
	word := func(b [8]byte) uint64 { return binary.LittleEndian.Uint64(b[:]) }
	first := func(b [8]byte) int { // index of the first special byte, 8 if none
		for i, c := range b {
			if !plainStringByte[c] {
				return i
			}
		}
		return 8
	}
	check := func(b [8]byte) {
		t.Helper()
		if got, want := bits.TrailingZeros64(specialBits(word(b)))>>3, first(b); got != want {
			t.Fatalf("specialBits(%q) marks byte %d first, want %d", b, got, want)
		}
	}
	for c := range 256 {
		for pos := range 8 {
			b := [8]byte{'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a'}
			b[pos] = byte(c)
			check(b)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1 << 16 {
		var b [8]byte
		for i := range b {
			if rng.IntN(16) == 0 { // one special byte in sixteen, next to plain ones that are close to special
				b[i] = []byte{0x00, 0x1f, '"', '\\', 0x80, 0xc3, 0xff}[rng.IntN(7)]
			} else {
				b[i] = []byte{0x20, '!', '#', '[', ']', 0x7f, 'a'}[rng.IntN(7)]
			}
		}
		check(b)
	}
}

// TestSkipSpace: skipSpace steps over exactly JSON's four whitespace bytes.
func TestSkipSpace(t *testing.T) {
	for c := range 256 {
		want := 0
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			want = 1
		}
		if got := skipSpace([]byte{byte(c), 'x'}, 0); got != want {
			t.Fatalf("skipSpace(%q) = %d, want %d", []byte{byte(c), 'x'}, got, want)
		}
	}
	if got := skipSpace([]byte(" \t\r\n "), 1); got != 5 {
		t.Fatalf("skipSpace of whitespace to the end = %d, want 5", got)
	}
}
