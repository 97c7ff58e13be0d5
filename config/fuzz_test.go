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
