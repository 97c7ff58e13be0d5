package config

import "testing"

// BenchmarkParseDefault is the cost of one reload of a typical file.
func BenchmarkParseDefault(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(defaultYAML); err != nil {
			b.Fatal(err)
		}
	}
}
