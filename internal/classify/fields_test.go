package classify

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// fieldLists are the name lists that field is called with.
var fieldLists = [][]string{topFields[:], messageFields[:], partFields[:]}

// TestFieldNamesLowerCase: field's ASCII fast path holds only for names in
// lower-case ASCII.
func TestFieldNamesLowerCase(t *testing.T) {
	for _, names := range fieldLists {
		for _, n := range names {
			for _, ch := range []byte(n) {
				if ch >= utf8.RuneSelf || 'A' <= ch && ch <= 'Z' {
					t.Fatalf("field name %q is not lower-case ASCII", n)
				}
			}
		}
	}
}

// fieldAllFolds is field without its ASCII fast path: every key is folded
// against every name. It is the oracle of FuzzField.
func fieldAllFolds(key []byte, names []string) (int, string) {
	for i, n := range names {
		if string(key) == n {
			return i, ""
		}
	}
	ascii := true
	for _, ch := range key {
		ascii = ascii && ch < utf8.RuneSelf
	}
	for _, n := range names {
		if (!ascii || len(key) == len(n)) && strings.EqualFold(string(key), n) {
			return -1, n
		}
	}
	return -1, ""
}

// FuzzField: field answers as fieldAllFolds does, for every list.
func FuzzField(f *testing.F) {
	for _, names := range fieldLists {
		for _, n := range names {
			f.Add([]byte(n))
			f.Add([]byte(strings.ToUpper(n)))
		}
	}
	for _, s := range []string{"", "temperature", "max_tokenſ", "max_to\u212Aens", "MODEL", "Model", "modeL\xff", "rolE"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, key []byte) {
		for _, names := range fieldLists {
			i, fold := field(key, names)
			if wi, wfold := fieldAllFolds(key, names); i != wi || fold != wfold {
				t.Fatalf("field(%q) = %d, %q; folding every name gives %d, %q", key, i, fold, wi, wfold)
			}
		}
	})
}
