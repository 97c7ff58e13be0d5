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

// chatRequest is a small chat completion request, as most are: a system
// prompt, a question and a few sampling parameters.
const chatRequest = `{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"system","content":` +
	`"You are a helpful assistant. Answer briefly."},{"role":"user","content":"What is the capital of ` +
	`France, and what is it known for?"}],"max_tokens":128,"temperature":0.7,"top_p":0.95,"stream":false}`

// BenchmarkClassifyChatSmall measures the whole body path of chatRequest.
func BenchmarkClassifyChatSmall(b *testing.B) {
	body := []byte(chatRequest)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Parse(KindChat, body, testEstimator); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClassifyCompletionSmall measures the whole body path of the
// completion that bench/run's saturation scenarios send.
func BenchmarkClassifyCompletionSmall(b *testing.B) {
	body := []byte(`{"model":"m","prompt":"Say hello to the benchmark","max_tokens":16,"stream":false}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Parse(KindCompletion, body, testEstimator); err != nil {
			b.Fatal(err)
		}
	}
}
