package usage

import (
	"bytes"
	"io"
	"testing"
)

// vllmChatResponse is a non-streamed chat completion as vLLM answers it:
// a few hundred bytes, its usage near the end.
const vllmChatResponse = `{"id":"chatcmpl-9b1f7c2e4d8a4f0e9c3b6a5d2e1f0a9b","object":"chat.completion",` +
	`"created":1765065600,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"message":` +
	`{"role":"assistant","content":"Paris is the capital of France. It is known for the Eiffel Tower, ` +
	`the Louvre and its caf\u00e9s.","refusal":null,"annotations":null,"audio":null,"function_call":null,` +
	`"tool_calls":[],"reasoning_content":null},"logprobs":null,"finish_reason":"stop","stop_reason":null}],` +
	`"service_tier":null,"system_fingerprint":null,"usage":{"prompt_tokens":25,"total_tokens":52,` +
	`"completion_tokens":27,"prompt_tokens_details":null},"prompt_logprobs":null,"kv_transfer_params":null}`

// BenchmarkUsageJSON reads vllmChatResponse through the body wrapper with
// its Content-Length known, in one read, as the reverse proxy reads a small
// response.
func BenchmarkUsageJSON(b *testing.B) {
	data := []byte(vllmChatResponse)
	want := Tokens{Prompt: 25, Completion: 27, Known: true}
	buf := make([]byte, 32<<10)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		res := usageResponse(200, jsonType, "", io.NopCloser(bytes.NewReader(data)))
		res.ContentLength = int64(len(data))
		var got Tokens
		watch(res, func(u Tokens) { got = u })
		for {
			if _, err := res.Body.Read(buf); err != nil {
				break
			}
		}
		res.Body.Close()
		if got != want {
			b.Fatalf("usage = %v, want %v", got, want)
		}
	}
}

// BenchmarkParseUsage reads the usage of vllmChatResponse, held whole, and
// of one SSE chunk whose usage is null (vLLM's chunks with include_usage):
// the document's check and the walk to its usage, without the body wrapper.
func BenchmarkParseUsage(b *testing.B) {
	chunk := `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1765065600,"model":"m",` +
		`"choices":[{"index":0,"delta":{"content":" Paris"},"logprobs":null,"finish_reason":null}],"usage":null}`
	for _, tt := range []struct {
		name, doc string
		want      Tokens
	}{
		{"json", vllmChatResponse, Tokens{Prompt: 25, Completion: 27, Known: true}},
		{"sse_chunk", chunk, Tokens{}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			doc := []byte(tt.doc)
			b.ReportAllocs()
			b.SetBytes(int64(len(doc)))
			for b.Loop() {
				if u, ok := parseUsage(doc); !ok || u != tt.want {
					b.Fatalf("parseUsage = %v, %v; want %v, true", u, ok, tt.want)
				}
			}
		})
	}
}
