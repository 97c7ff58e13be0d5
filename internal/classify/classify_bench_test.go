package classify

import (
	"os"
	"path/filepath"
	"testing"
)

func readChat4KiB(b *testing.B) []byte {
	b.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", "classify", "chat-4k.json"))
	if err != nil {
		b.Fatal(err)
	}
	if len(body) != 4096 {
		b.Fatalf("chat-4k.json is %d bytes, want 4096", len(body))
	}
	return body
}

// BenchmarkClassifyChat4KiB measures the whole body path of a chat request:
// CheckJSON plus classify.
func BenchmarkClassifyChat4KiB(b *testing.B) {
	body := readChat4KiB(b)
	kind := KindChat
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Parse(kind, body, testEstimator); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJSONCheck4KiB measures CheckJSON alone on the same body.
func BenchmarkJSONCheck4KiB(b *testing.B) {
	body := readChat4KiB(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := CheckJSON(body); err != nil {
			b.Fatal(err)
		}
	}
}
