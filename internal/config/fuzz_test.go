package config

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func FuzzLoad(f *testing.F) {
	f.Add([]byte(`{"upstreams":[{"name":"a","url":"http://a:8000"}]}`))
	f.Add(defaultYAML)
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, name := range files {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Load(bytes.NewReader(data))
		if err != nil {
			if c != nil {
				t.Fatalf("Load returned a config with error %v", err)
			}
			// Every problem's line is one of the file's (a syntax error's
			// is found again on a prefix of the file: issue 35, item 13).
			lines := len(lineEnds(data)) + 1
			for _, p := range flatten(err) {
				if fe, ok := p.(*FieldError); ok && (fe.Line < 0 || fe.Line > lines) {
					t.Fatalf("problem %q names line %d of a file of %d", fe, fe.Line, lines)
				}
			}
			return // rejecting input is fine; panicking is not
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Load accepted a config that Validate rejects: %v", err)
		}
		if len(c.Upstreams) == 0 {
			t.Fatalf("Load accepted a config without upstreams")
		}
	})
}

// flatten lists the problems of an error errors.Join made.
func flatten(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, flatten(e)...)
	}
	return out
}
